package cli

import "testing"

// The server's request field names become the flags that set them.
func TestFlagNames(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`set_inputs: input "size" is a number, not "big" (app revision 3)`, `--input: input "size" is a number, not "big" (app revision 3)`},
		{`unset_inputs[0]: "size" is also in set_inputs`, `--unset: "size" is also in --input`},
		{`set_inputs[bad-key]: is not a valid input name`, `--input bad-key: is not a valid input name`},
		{`inputs[x]: is 9000 bytes`, `--input x: is 9000 bytes`},
		{`app "shop" has no inputs named x`, `app "shop" has no inputs named x`},
		{`set_inputs: inputs.size: input "size" is a number, not "big" (app revision 1)`, `--input size: input "size" is a number, not "big" (app revision 1)`},
		{`parallelism: must be between 1 and 64`, `--parallelism: must be between 1 and 64`},
	} {
		flags := append(inputFlags, fieldFlag{"inputs", "--input"})
		if got := flagNames(c.in, flags); got != c.want {
			t.Errorf("flagNames(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
