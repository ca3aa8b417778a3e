package wire_test

import (
	"fmt"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
)

// NewJob builds a payload from Go values; Client.Push completes it.
func ExampleNewJob() {
	job, err := wire.NewJob("HardJob", 1, "two", 3.0)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(job.Bytes()))
	// Output:
	// {"class":"HardJob","args":[1,"two",3.0]}
}

// ParseJob reads a payload as Ruby Sidekiq wrote it.
func ExampleParseJob() {
	job, err := wire.ParseJob([]byte(`{"retry":true,"queue":"critical","class":"HardJob","args":[1],"jid":"b4a577edbccf1d805744efa9","created_at":1700000000.5,"enqueued_at":1700000001.25}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(job.Class(), job.Queue(), job.JID())
	enq, _ := job.Time("enqueued_at")
	fmt.Println(enq.UTC().Format(time.RFC3339Nano))
	// Output:
	// HardJob critical b4a577edbccf1d805744efa9
	// 2023-11-14T22:13:21.25Z
}
