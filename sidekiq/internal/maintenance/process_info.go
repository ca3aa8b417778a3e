package maintenance

import (
	"os"
	"time"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/sidekiq/rubyjson"
	"github.com/gojob/gojob/sidekiq/wire"
)

// ProcessInfo is what the `info` field of the process hash says about this
// process (docs/sidekiq-wire.md#process-info).
type ProcessInfo struct {
	// PID is the pid written; 0 means this process's.
	PID       int
	Identity  string
	Hostname  string
	StartedAt time.Time
	Tag       string
	// DirTag is the tag 8.0+ writes when Tag is empty: the base name of the
	// working directory.
	DirTag      string
	Labels      []string
	Concurrency int
	Queues      []wire.QueueWeight
}

// JSON returns the info JSON version v writes (Launcher#to_data); v picks
// the fields and their order.
func (p *ProcessInfo) JSON(v wire.Version) []byte {
	m := rubyjson.NewMap()
	m.Set("hostname", rubyjson.StringValue(p.Hostname))
	m.Set("started_at", rubyjson.FloatValue(contract.EpochSeconds(p.StartedAt)))
	pid := p.PID
	if pid == 0 {
		pid = os.Getpid()
	}
	m.Set("pid", rubyjson.IntValue(int64(pid)))
	tag := p.Tag
	if tag == "" && v.AtLeast(8, 0, 0) {
		tag = p.DirTag
	}
	m.Set("tag", rubyjson.StringValue(tag))
	if !v.AtLeast(8, 1, 2) {
		// 8.1.2+ writes concurrency only as a field of the process hash.
		m.Set("concurrency", rubyjson.IntValue(int64(p.Concurrency)))
	}
	var queues []rubyjson.Value
	weights := rubyjson.NewMap()
	for _, q := range p.Queues {
		if !weights.Has(q.Name) {
			queues = append(queues, rubyjson.StringValue(q.Name))
			weights.Set(q.Name, rubyjson.IntValue(int64(q.Weight)))
		}
	}
	if v.AtLeast(8, 0, 9) {
		capsule := rubyjson.NewMap()
		capsule.Set("concurrency", rubyjson.IntValue(int64(p.Concurrency)))
		capsule.Set("mode", rubyjson.StringValue(p.fetchMode()))
		capsule.Set("weights", rubyjson.ObjectValue(weights))
		caps := rubyjson.NewMap()
		caps.Set("default", rubyjson.ObjectValue(capsule))
		m.Set("capsules", rubyjson.ObjectValue(caps))
	}
	m.Set("queues", rubyjson.ArrayValue(queues...))
	switch {
	case v.AtLeast(7, 0, 3):
		m.Set("weights", rubyjson.ArrayValue(rubyjson.ObjectValue(weights)))
	case v == wire.Version{Major: 7, Minor: 0, Patch: 2}:
		// 7.0.2: a tally of the weighted queue list, where each entry
		// appears max(weight, 1) times.
		tally := rubyjson.NewMap()
		for _, q := range p.Queues {
			n := int64(0)
			if c, ok := tally.Get(q.Name); ok {
				n, _ = c.Int()
			}
			tally.Set(q.Name, rubyjson.IntValue(n+int64(max(q.Weight, 1))))
		}
		m.Set("weights", rubyjson.ObjectValue(tally))
	}
	labels := make([]rubyjson.Value, len(p.Labels))
	for i, l := range p.Labels {
		labels[i] = rubyjson.StringValue(l)
	}
	m.Set("labels", rubyjson.ArrayValue(labels...))
	m.Set("identity", rubyjson.StringValue(p.Identity))
	if v.AtLeast(7, 0, 2) {
		m.Set("version", rubyjson.StringValue(v.String()))
	}
	if v.AtLeast(7, 0, 3) {
		m.Set("embedded", rubyjson.BoolValue(false))
	}
	return m.Encode()
}

// fetchMode is the capsule mode of 7.0.3+: strict when no weights, random
// when all are 1, weighted otherwise.
func (p *ProcessInfo) fetchMode() string {
	allZero, allOne := true, true
	for _, q := range p.Queues {
		if q.Weight != 0 {
			allZero = false
		}
		if q.Weight != 1 {
			allOne = false
		}
	}
	switch {
	case allZero:
		return "strict"
	case allOne:
		return "random"
	}
	return "weighted"
}
