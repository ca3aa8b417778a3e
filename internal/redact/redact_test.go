package redact

import "testing"

func TestURLHidesThePassword(t *testing.T) {
	cases := map[string]string{
		"redis://:Sup3rSecretPW@127.0.0.1:6379/0":    "redis://:xxxxx@127.0.0.1:6379/0",
		"rediss://user:Sup3rSecretPW@host/1":         "rediss://user:xxxxx@host/1",
		"redis://127.0.0.1:6379/0":                   "redis://127.0.0.1:6379/0",
		"unix://:Sup3rSecretPW@/tmp/redis.sock?db=1": "unix://:xxxxx@/tmp/redis.sock?db=1",
		"redis://:Sup3rSecret%zzPW@127.0.0.1/0":      "redis://:xxxxx@127.0.0.1/0",
		"postgres://app:Sup3rSecretPW@db:5432/app":   "postgres://app:xxxxx@db:5432/app",
	}
	for in, want := range cases {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
	raw := "redis://:Sup3rSecret%zzPW@127.0.0.1/0"
	msg := `parse "redis://:Sup3rSecret%zzPW@127.0.0.1/0": invalid URL escape "%zz"; Sup3rSecret%zzPW`
	if got := String(msg, raw); got != `parse "redis://:xxxxx@127.0.0.1/0": invalid URL escape "%zz"; xxxxx` {
		t.Errorf("String: %q", got)
	}
}
