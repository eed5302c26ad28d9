package release

import (
	"context"
	"time"

	"github.com/byoc-dev/byoc/imsd/store"
	"github.com/byoc-dev/byoc/internal/window"
)

// InstallWindows is the Windows of installs as imsd knows them: the
// vendor's (the install's settings, from installs/NAME.toml) and the
// customer's (as the install's agents last reported them). An install is
// open when both are; windows that cannot be read keep it closed, saying
// why.
type InstallWindows struct{ Store *store.Store }

// Open implements Windows.
func (w InstallWindows) Open(ctx context.Context, in store.Install, now time.Time) (bool, time.Time, string, error) {
	vendor, err := window.ParseSchedule(in.Settings.Windows)
	if err != nil {
		return false, time.Time{}, "the install's maintenance windows cannot be read: " + err.Error(), nil
	}
	agents, err := w.Store.AgentsForInstall(ctx, in.ID)
	if err != nil {
		return false, time.Time{}, "", err
	}
	var texts []string
	for _, a := range agents {
		if a.Permissions != nil {
			texts = append(texts, a.Permissions.Windows...)
		}
	}
	customer, err := window.ParseSchedule(texts)
	if err != nil {
		return false, time.Time{}, "the customer's maintenance windows cannot be read: " + err.Error(), nil
	}
	vendorOpen, customerOpen := vendor.Contains(now), customer.Contains(now)
	if vendorOpen && customerOpen {
		return true, time.Time{}, "", nil
	}
	why := "outside the vendor's window " + vendor.String()
	if vendorOpen {
		why = "outside the customer's window " + customer.String()
	}
	next, ok := window.NextBoth(now, vendor, customer)
	if !ok {
		why += "; the vendor's and the customer's windows never meet"
	}
	return false, next, why, nil
}
