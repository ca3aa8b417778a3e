package activejob

import (
	"fmt"
	"time"

	"github.com/gojob/gojob/sidekiq/wire"
)

// New builds the payload Rails' Sidekiq adapter writes for
// NotifyJob.set(queue: :mailers).perform_later(:welcome, 5.minutes).
func ExampleNew() {
	job, err := New(&Params{
		Class:      "NotifyJob",
		Args:       []any{Symbol("welcome"), 5 * time.Minute},
		Queue:      "mailers",
		JobID:      "0b1e6a2e-1f7c-4a55-9d0e-6f1b3f0c2a77",
		EnqueuedAt: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
		Version:    wire.Version6,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(job.Bytes()))
	// Output:
	// {"class":"ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper","wrapped":"NotifyJob","queue":"mailers","args":[{"job_class":"NotifyJob","job_id":"0b1e6a2e-1f7c-4a55-9d0e-6f1b3f0c2a77","provider_job_id":null,"queue_name":"mailers","priority":null,"arguments":[{"_aj_serialized":"ActiveJob::Serializers::SymbolSerializer","value":"welcome"},{"_aj_serialized":"ActiveJob::Serializers::DurationSerializer","value":300,"parts":[[{"_aj_serialized":"ActiveJob::Serializers::SymbolSerializer","value":"minutes"},5]]}],"executions":0,"exception_executions":{},"locale":"en","timezone":null,"enqueued_at":"2024-01-02T03:04:05Z"}]}
}
