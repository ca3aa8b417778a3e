package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/buildinfo"
)

// versionString is what `gojob --version` and `gojob version` print: the
// version (stamped at link time, the module version, or "devel"), the VCS
// revision of a build from a checkout, and the Go toolchain.
func versionString() string {
	v := buildinfo.Version()
	var rev, modified string
	if bi, ok := debug.ReadBuildInfo(); ok {
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
		Flags: []ucli.Flag{newJSONFlag()},
		Action: func(c *ucli.Context) error {
			if c.Bool("json") {
				e := &cmdEnv{out: c.App.Writer}
				return e.printJSON(map[string]string{"version": buildinfo.Version(), "description": versionString(),
					"go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH})
			}
			_, err := fmt.Fprintln(c.App.Writer, "gojob version", versionString())
			return err
		},
	}
}
