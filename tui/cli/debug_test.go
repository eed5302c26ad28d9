package cli

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// splitDebugArgs keeps byoc's own flags for cobra and the debug
// command's for the command, values included.
func TestSplitDebugArgs(t *testing.T) {
	root := &cobra.Command{Use: "byoc"}
	root.PersistentFlags().StringP("output", "o", "text", "")
	var reason string
	cmd := &cobra.Command{Use: "debug", DisableFlagParsing: true, RunE: func(*cobra.Command, []string) error { return nil }}
	cmd.Flags().StringVar(&reason, "reason", "", "")
	root.AddCommand(cmd)

	words, named, own, err := splitDebugArgs(cmd, []string{"acme", "logs", "api", "--since", "10m", "--reason", "ticket 1",
		"--tail-lines=5", "-o", "json", "--note", "$(id); rm -rf /", "--", "--not-a-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(words, []string{"acme", "logs", "api", "--not-a-flag"}) {
		t.Errorf("words = %q", words)
	}
	if want := map[string]string{"since": "10m", "tail_lines": "5", "note": "$(id); rm -rf /"}; !maps.Equal(named, want) {
		t.Errorf("named = %q, want %q", named, want)
	}
	if !slices.Equal(own, []string{"--reason", "ticket 1", "-o", "json"}) {
		t.Errorf("own = %q", own)
	}
	if _, _, own, _ := splitDebugArgs(cmd, []string{"acme", "--help"}); own != nil {
		t.Errorf("--help: own = %q, want nil (help)", own)
	}
	for args, want := range map[string]string{
		"acme logs --since":     "argument --since needs a value",
		"acme logs --a 1 --a 2": "argument --a is given twice",
		"acme logs -x":          "unknown flag -x",
	} {
		_, _, _, err := splitDebugArgs(cmd, strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
