package expiry_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/gojob/gojob/expiry"
	"github.com/gojob/gojob/internal/clocktest"
	"github.com/gojob/gojob/sidekiq"
	"github.com/gojob/gojob/sidekiq/wire"
)

// The extension drops a job whose expires_at has passed and runs the
// others. In a program: srv.Extend(expiry.New(expiry.Config{Logger: log})),
// and push with sidekiq.PushOpts{ExpiresIn: time.Hour}. Here its hook is
// called directly with a fixed clock.
func ExampleNew() {
	now := time.Unix(1700000000, 0)
	log := zerolog.New(os.Stdout)
	ext := expiry.New(expiry.Config{Logger: log, Clock: clocktest.NewFake(now)})
	run := func(payload string) {
		job, _ := wire.ParseJob([]byte(payload))
		ext.Run(context.Background(), &sidekiq.Run{Job: job}, func(context.Context) error {
			fmt.Println("ran", job.JID())
			return nil
		})
	}
	run(`{"class":"DigestJob","args":[],"jid":"fresh","expires_at":1700000060.0}`)
	run(`{"class":"DigestJob","args":[],"jid":"stale1","expires_at":1699999940.0}`)
	run(`{"class":"DigestJob","args":[],"jid":"stale2","expires_at":1699999999.5}`)
	fmt.Println("expired:", ext.ExpiredByClass())
	// Output:
	// ran fresh
	// {"level":"info","class":"DigestJob","jid":"stale1","expired_at":"2023-11-14T22:12:20.000Z","message":"expired job skipped; later expired jobs of this class are counted, not logged"}
	// expired: map[DigestJob:2]
}
