package api_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/api"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

func encodeArgs(vs []rubyjson.Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = string(v.Encode())
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Jobs read as Sidekiq's Web UI shows them (JobRecord#display_class and
// #display_args, lib/sidekiq/api.rb, 8.1.7).
func TestDisplayClassAndArgsUnwrapActiveJob(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../testdata/activejob/mailer-retry.json")
	require.NoError(t, err)
	m, err := wire.ParseJob([]byte(strings.TrimSpace(string(raw))))
	require.NoError(t, err)
	require.Equal(t, "UserMailer#welcome", (&api.JobRecord{Job: m}).DisplayClass())
	require.Equal(t, `[{"user":"gid://app/User/7"},["gid://app/User/7"]]`, encodeArgs((&api.JobRecord{Job: m}).DisplayArgs()))
	require.Equal(t, "1b6f3c9e-4d0a-4c8e-9d5e-2f1a7b3c4d5e", contract.ActiveJobID(m))

	// A real Rails capture (Sidekiq 7.3.10).
	raw, err = os.ReadFile("../../testdata/ruby-fixtures/7.3.10/client_activejob.json")
	require.NoError(t, err)
	aj, err := wire.ParseJob([]byte(strings.TrimSpace(string(raw))))
	require.NoError(t, err)
	require.Equal(t, "AjJob", (&api.JobRecord{Job: aj}).DisplayClass())
	require.Equal(t, `[1,"x"]`, encodeArgs((&api.JobRecord{Job: aj}).DisplayArgs()))
	require.Equal(t, "89c94c75-7239-4dc5-a691-12325327a1b0", contract.ActiveJobID(aj))

	// Plain jobs: the class, the args; display_class wins; encrypted
	// args are hidden.
	p, err := wire.ParseJob([]byte(`{"class":"HardJob","args":[1,"secret"],"jid":"j1","encrypt":true}`))
	require.NoError(t, err)
	require.Equal(t, "HardJob", (&api.JobRecord{Job: p}).DisplayClass())
	require.Equal(t, `[1,"[encrypted data]"]`, encodeArgs((&api.JobRecord{Job: p}).DisplayArgs()))
	require.Equal(t, `[1,"secret"]`, encodeArgs(p.Args()), "the job itself is untouched")
	require.Empty(t, contract.ActiveJobID(p))
	d, err := wire.ParseJob([]byte(`{"class":"X","display_class":"Shown","args":[],"jid":"j2"}`))
	require.NoError(t, err)
	require.Equal(t, "Shown", (&api.JobRecord{Job: d}).DisplayClass())
}
