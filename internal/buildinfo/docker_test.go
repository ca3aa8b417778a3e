package buildinfo

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The Dockerfile builds an image whose entrypoint is a stamped gojob run as
// a non-root user. It needs a docker binary and a daemon that answers; the
// test skips without them.
func TestDockerImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a container image")
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, docker, "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no docker daemon: %v: %s", err, strings.TrimSpace(string(out)))
	}

	const stamp = "v0.1.0-docker-test"
	tag := "gojob-buildinfo-test:" + strings.ReplaceAll(time.Now().Format("20060102150405.000000"), ".", "")
	build := exec.Command(docker, "build", "--build-arg", "VERSION="+stamp, "-t", tag, ".")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(docker, "rmi", "-f", tag).Run() })

	out, err := exec.Command(docker, "run", "--rm", tag, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run %s --version: %v\n%s", tag, err, out)
	}
	if !strings.HasPrefix(string(out), "gojob version "+stamp+",") {
		t.Errorf("docker run %s --version printed %q, want gojob version %s", tag, out, stamp)
	}
	user, err := exec.Command(docker, "image", "inspect", "--format", "{{.Config.User}}", tag).Output()
	if err != nil {
		t.Fatalf("docker image inspect: %v", err)
	}
	if u := strings.TrimSpace(string(user)); u == "" || u == "root" || u == "0" || strings.HasPrefix(u, "0:") {
		t.Errorf("the image runs as %q, want a non-root user", u)
	}
}
