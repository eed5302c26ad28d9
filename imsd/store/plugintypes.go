package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/byoc-dev/byoc/imsd/errs"
)

// PluginType is a registered third-party component type: the latest
// description its plugin printed with describe.
type PluginType struct {
	Type     string
	Version  string
	Protocol string
	// Description is the describe JSON (typeschema.Description: the
	// fields imsd knows); ConfigSchema its config schema ("" when the
	// type declares none).
	Description  string
	ConfigSchema string
	RegisteredAt time.Time
	RegisteredBy string
}

type pluginTypeRow struct {
	Type         string `db:"type"`
	Version      string `db:"version"`
	Protocol     string `db:"protocol"`
	Description  string `db:"description"`
	ConfigSchema string `db:"config_schema"`
	RegisteredAt int64  `db:"registered_at"`
	RegisteredBy string `db:"registered_by"`
}

func (r pluginTypeRow) pluginType() PluginType {
	return PluginType{Type: r.Type, Version: r.Version, Protocol: r.Protocol, Description: r.Description,
		ConfigSchema: r.ConfigSchema, RegisteredAt: fromNanos(r.RegisteredAt), RegisteredBy: r.RegisteredBy}
}

const pluginTypeColumns = `type, version, protocol, description, config_schema, registered_at, registered_by`

// PutPluginType registers p, replacing the type's earlier registration if
// there is one; it returns that one and whether it existed. The caller has
// checked the description: the store keeps what it is given.
func (s *Store) PutPluginType(ctx context.Context, p PluginType) (prev PluginType, replaced bool, err error) {
	switch {
	case p.Type == "":
		return PluginType{}, false, errs.Field("type", "required")
	case p.Version == "":
		return PluginType{}, false, errs.Field("version", "required")
	case p.Description == "":
		return PluginType{}, false, errs.Field("description", "required")
	}
	if err := requireTime("registered_at", p.RegisteredAt); err != nil {
		return PluginType{}, false, err
	}
	err = s.write(ctx, "put plugin type", func(tx *txn) error {
		var old pluginTypeRow
		err := tx.GetContext(ctx, &old, s.bind(`SELECT `+pluginTypeColumns+` FROM plugin_types WHERE type = ?`+s.forUpdate()), p.Type)
		switch {
		case err == nil:
			prev, replaced = old.pluginType(), true
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		_, err = tx.ExecContext(ctx, s.bind(`INSERT INTO plugin_types (`+pluginTypeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (type) DO UPDATE SET version = excluded.version, protocol = excluded.protocol,
			description = excluded.description, config_schema = excluded.config_schema,
			registered_at = excluded.registered_at, registered_by = excluded.registered_by`),
			p.Type, p.Version, p.Protocol, p.Description, p.ConfigSchema, nanos(p.RegisteredAt), p.RegisteredBy)
		if err != nil {
			return err
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: VendorChain, At: p.RegisteredAt, Kind: "plugin_type.registered", Actor: p.RegisteredBy,
			Subject: "type:" + p.Type, Data: map[string]string{"version": p.Version, "protocol": p.Protocol}})
	})
	if err != nil {
		return PluginType{}, false, err
	}
	return prev, replaced, nil
}

// ListPluginTypes returns every registered type, by type name.
func (s *Store) ListPluginTypes(ctx context.Context) ([]PluginType, error) {
	var rows []pluginTypeRow
	if err := s.r.SelectContext(ctx, &rows, `SELECT `+pluginTypeColumns+` FROM plugin_types ORDER BY type`); err != nil {
		return nil, fmt.Errorf("list plugin types: %w", err)
	}
	out := make([]PluginType, len(rows))
	for i, r := range rows {
		out[i] = r.pluginType()
	}
	return out, nil
}

// GetPluginType returns the registration of type typ.
func (s *Store) GetPluginType(ctx context.Context, typ string) (PluginType, error) {
	var r pluginTypeRow
	err := s.r.GetContext(ctx, &r, s.bind(`SELECT `+pluginTypeColumns+` FROM plugin_types WHERE type = ?`), typ)
	if errors.Is(err, sql.ErrNoRows) {
		return PluginType{}, errs.E(errs.NotFound, "component type %q is not registered", typ)
	}
	if err != nil {
		return PluginType{}, fmt.Errorf("get plugin type %s: %w", typ, err)
	}
	return r.pluginType(), nil
}

// DeletePluginType removes the registration of type typ at now, with its
// audit record. Revisions that use the type stay as they are.
func (s *Store) DeletePluginType(ctx context.Context, typ string, now time.Time) error {
	return s.write(ctx, "delete plugin type", func(tx *txn) error {
		res, err := tx.ExecContext(ctx, s.bind(`DELETE FROM plugin_types WHERE type = ?`), typ)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return errs.E(errs.NotFound, "component type %q is not registered", typ)
		}
		return s.Audit(ctx, tx, AuditEvent{Chain: VendorChain, At: now, Kind: "plugin_type.deleted", Subject: "type:" + typ})
	})
}
