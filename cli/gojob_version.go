package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	ucli "github.com/urfave/cli/v2"
)

// Version is gojob's version. A release build sets it with
// -ldflags "-X github.com/gojob/gojob/cli.Version=v1.2.3"; otherwise it is
// the module version Go recorded (a tagged `go install …@v1.2.3`), or
// "devel" with the VCS revision of a build from a checkout.
var Version = ""

// versionString is what `gojob --version` and `gojob version` print.
func versionString() string {
	v := Version
	var rev, modified string
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = ", modified"
				}
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += fmt.Sprintf(" (%s%s)", rev, modified)
	}
	return fmt.Sprintf("%s, %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print gojob's version (also gojob --version)",
		Action: func(c *ucli.Context) error {
			_, err := fmt.Fprintln(c.App.Writer, "gojob version", versionString())
			return err
		},
	}
}
