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

func TestURLHidesQueryCredentials(t *testing.T) {
	cases := map[string]string{
		"postgres://app@db:5432/app?password=Sup3rSecretPW&sslmode=disable": "postgres://app@db:5432/app?password=xxxxx&sslmode=disable",
		"postgres://db/app?sslmode=require&sslpassword=Sup3rSecretPW":       "postgres://db/app?sslmode=require&sslpassword=xxxxx",
		"postgres://u:Sup3rSecretPW@db/app?PASSWORD=Other":                  "postgres://u:xxxxx@db/app?PASSWORD=xxxxx",
		"redis://h:6379/0?token=Sup3rSecretPW&api_key=K3y&db=2":             "redis://h:6379/0?token=xxxxx&api_key=xxxxx&db=2",
		"postgres://db/app?password=Sup3r%zzSecret":                         "postgres://db/app?password=xxxxx",
		"https://example.com/x?q=passing":                                   "https://example.com/x?q=passing",
		"sqlite:/var/lib/app.db":                                            "sqlite:/var/lib/app.db",
	}
	for in, want := range cases {
		if got := URL(in); got != want {
			t.Errorf("URL(%q) = %q, want %q", in, got, want)
		}
	}
	raw := "postgres://app@db/app?password=Sup3rSecretPW"
	if got := String(`failed to connect to db: password=Sup3rSecretPW rejected`, raw); got != `failed to connect to db: password=xxxxx rejected` {
		t.Errorf("String: %q", got)
	}
}
