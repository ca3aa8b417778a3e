package durable

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeGroups is an applier that records its groups and answers every op
// true. A group whose first op is in gates waits for a receive there.
type fakeGroups struct {
	mu     sync.Mutex
	groups [][]string
	gates  map[string]chan struct{}
	began  chan string // when set, gets each group's first op as it starts
}

func (f *fakeGroups) apply(_ context.Context, ops []*gcOp) error {
	var jids []string
	for _, op := range ops {
		jids = append(jids, fmt.Sprintf("%d:%s", op.kind, op.jid()))
	}
	if f.began != nil {
		f.began <- jids[0]
	}
	if gate := f.gates[jids[0]]; gate != nil {
		<-gate
	}
	for _, op := range ops {
		op.ok = true
	}
	f.mu.Lock()
	f.groups = append(f.groups, jids)
	f.mu.Unlock()
	return nil
}

func lockOp(jid string) *gcOp { return &gcOp{kind: gcLock, lk: lockParams{JobID: jid}} }

func TestGroupCommitAnswersEveryCallerOfAGroup(t *testing.T) {
	f := &fakeGroups{}
	g := newGroupCommit(f.apply, f.apply, func(error) bool { return false }, 0, 1000, 1)
	defer g.close()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := g.do(context.Background(), lockOp(fmt.Sprint("jid", i)))
			if !ok || err != nil {
				errs <- fmt.Errorf("op %d: ok=%v err=%v", i, ok, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestGroupCommitWriteHeldForItsJidIsAnsweredByALaterGroup(t *testing.T) {
	f := &fakeGroups{gates: map[string]chan struct{}{"2:a": make(chan struct{}), "2:b": make(chan struct{})},
		began: make(chan string, 3)}
	g := newGroupCommit(f.apply, f.apply, func(error) bool { return false }, 0, 1000, 2)
	defer g.close()

	first := make(chan error, 1)
	go func() {
		_, err := g.do(context.Background(), lockOp("a"))
		first <- err
	}()
	if got := <-f.began; got != "2:a" {
		t.Fatalf("first group starts with %s", got)
	}
	// Queued while a's lock is written: they share one wait at first; the
	// other writer takes b and leaves a's delete for a later group.
	opA, opB := &gcOp{kind: gcDelete, del: deleteLockedParams{JobID: "a"}}, lockOp("b")
	if err := g.enqueue(opA, opB); err != nil {
		t.Fatal(err)
	}
	heldDone, otherDone := make(chan bool, 1), make(chan bool, 1)
	go func() { heldDone <- g.wait(context.Background(), opA) }()
	go func() { otherDone <- g.wait(context.Background(), opB) }()
	if got := <-f.began; got != "2:b" {
		t.Fatalf("second group starts with %s", got)
	}
	close(f.gates["2:b"])
	if !<-otherDone || !opB.ok {
		t.Fatal("b not answered")
	}
	select {
	case <-heldDone:
		t.Fatal("the held write of a was answered before its group ran")
	case <-time.After(20 * time.Millisecond):
	}
	close(f.gates["2:a"])
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !<-heldDone || !opA.ok || opA.err != nil {
		t.Fatalf("held write of a: ok=%v err=%v", opA.ok, opA.err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := [][]string{{"2:b"}, {"2:a"}, {"3:a"}}
	if fmt.Sprint(f.groups) != fmt.Sprint(want) {
		t.Fatalf("groups %v, want %v", f.groups, want)
	}
}

func TestGroupCommitCallerWhoseContextEndsStopsWaiting(t *testing.T) {
	f := &fakeGroups{gates: map[string]chan struct{}{"2:a": make(chan struct{})}, began: make(chan string, 1)}
	g := newGroupCommit(f.apply, f.apply, func(error) bool { return false }, 0, 1000, 1)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, lockOp("a"))
		res <- err
	}()
	<-f.began
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	close(f.gates["2:a"])
	g.close()
}

func TestGroupCommitWritesQueuedAtCloseAreWrittenOrRefused(t *testing.T) {
	f := &fakeGroups{}
	g := newGroupCommit(f.apply, f.apply, func(error) bool { return false }, time.Hour, 1000, 1)
	res := make(chan error, 1)
	go func() {
		_, err := g.do(context.Background(), lockOp("a"))
		res <- err
	}()
	// The hour-long window holds the write until close, which writes it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		n := len(g.queue)
		g.mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g.close()
	if err := <-res; err != nil {
		t.Fatalf("queued write at close: %v", err)
	}
	if _, err := g.do(context.Background(), lockOp("b")); !errors.Is(err, errGroupClosed) {
		t.Fatalf("write after close: %v, want errGroupClosed", err)
	}
}
