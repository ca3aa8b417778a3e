// Package buildinfo reports the version of the gojob binary.
//
// A release build stamps it at link time (make release does):
//
//	go build -ldflags "-X github.com/gojob/gojob/internal/buildinfo.version=v0.1.0" ./cmd/gojob
//
// The stamp does not depend on VCS information, so it holds for builds made
// with -buildvcs=false or outside a git checkout (a Docker build context).
package buildinfo

import "runtime/debug"

// version is set with -ldflags -X; empty in an unstamped build.
var version string

// Version returns the stamped version; without a stamp, the module version
// Go recorded (a tagged `go install github.com/gojob/gojob/cmd/gojob@v0.1.0`);
// otherwise "devel".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
