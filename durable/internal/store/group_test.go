package store

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
	// delays makes a group whose first op is in it take that long.
	delays map[string]time.Duration
}

func (f *fakeGroups) apply(_ context.Context, ops []*Op) error {
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
	time.Sleep(f.delays[jids[0]])
	for _, op := range ops {
		op.ok = true
	}
	f.mu.Lock()
	f.groups = append(f.groups, jids)
	f.mu.Unlock()
	return nil
}

func lockOp(jid string) *Op { return &Op{kind: opLock, lk: LockParams{JobID: jid}} }

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
	opA, opB := &Op{kind: opDelete, del: DeleteParams{JobID: "a"}}, lockOp("b")
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

// groupsSeen returns the groups f has written so far.
func (f *fakeGroups) groupsSeen() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.groups...)
}

// gatherGroupCommit is a one-writer group commit that gathers for up to
// max, with the first group (whose first op is first) taking firstTook.
func gatherGroupCommit(first string, firstTook, max time.Duration) (*groupCommit, *fakeGroups) {
	f := &fakeGroups{delays: map[string]time.Duration{first: firstTook}}
	g := newGroupCommit(f.apply, f.apply, func(error) bool { return false }, 0, 1000, 1)
	g.gather = max
	return g, f
}

// lockFirstGroup writes the locks of jids as one group and returns their
// ops, answered.
func lockFirstGroup(t *testing.T, g *groupCommit, jids ...string) []*Op {
	t.Helper()
	ops := make([]*Op, len(jids))
	for i, jid := range jids {
		ops[i] = lockOp(jid)
	}
	if err := g.enqueue(ops...); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		g.wait(context.Background(), op)
	}
	return ops
}

func TestGroupCommitWritesTheReleasedCohortsNextLocksInOneGroup(t *testing.T) {
	g, f := gatherGroupCommit("2:a0", 500*time.Millisecond, 5*time.Second)
	defer g.close()
	lockFirstGroup(t, g, "a0", "a1", "a2", "a3", "a4")
	// The released jobs ask for their next locks one after the other, well
	// within the 500ms the last group took.
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 20 * time.Millisecond)
			if _, err := g.do(context.Background(), lockOp(fmt.Sprint("b", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	groups := f.groupsSeen()
	if len(groups) != 2 || len(groups[1]) != 5 {
		t.Fatalf("groups %v, want the five b locks in the second", groups)
	}
}

func TestGroupCommitGathersNoLongerThanTheLastGroupTook(t *testing.T) {
	g, f := gatherGroupCommit("2:a0", 100*time.Millisecond, 5*time.Second)
	defer g.close()
	lockFirstGroup(t, g, "a0", "a1", "a2")
	// One job of three comes back: its lock waits for the other two for as
	// long as the last group took, not for the 5s bound.
	start := time.Now()
	if _, err := g.do(context.Background(), lockOp("b0")); err != nil {
		t.Fatal(err)
	}
	// The gathering is counted from the end of the last group, which the
	// writer sees a moment before start.
	if took := time.Since(start); took < 90*time.Millisecond || took > 2*time.Second {
		t.Fatalf("the lock took %v, want the last group's 100ms of gathering", took)
	}
	if groups := f.groupsSeen(); len(groups) != 2 || len(groups[1]) != 1 {
		t.Fatalf("groups %v", groups)
	}
}

func TestGroupCommitDoesNotHoldAPushWhileGathering(t *testing.T) {
	g, _ := gatherGroupCommit("2:a0", time.Second, 5*time.Second)
	defer g.close()
	lockFirstGroup(t, g, "a0", "a1", "a2")
	start := time.Now()
	if _, err := g.do(context.Background(), &Op{kind: opUpsert, up: &UpsertParams{JobID: "p"}}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("the upsert waited %v for the cohort (the last group took 1s)", took)
	}
}

func TestGroupCommitWithoutGatherWritesTheNextLockAtOnce(t *testing.T) {
	g, _ := gatherGroupCommit("2:a0", time.Second, 0)
	defer g.close()
	lockFirstGroup(t, g, "a0", "a1", "a2")
	start := time.Now()
	if _, err := g.do(context.Background(), lockOp("b0")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("the lock waited %v with gathering off", took)
	}
}

func TestGroupCommitWritesTheNextGroupAtOnceAfterAGatherThatMissedItsCohort(t *testing.T) {
	g, f := gatherGroupCommit("2:a0", 300*time.Millisecond, 5*time.Second)
	f.delays["2:b0"] = 300 * time.Millisecond
	defer g.close()
	lockFirstGroup(t, g, "a0", "a1", "a2")
	// Two of the three come back: the writer waits the 300ms the last group
	// took for the third, in vain.
	lockFirstGroup(t, g, "b0", "b1")
	// The next group has two locks to wait for, but after the miss the
	// writer does not wait.
	start := time.Now()
	if _, err := g.do(context.Background(), lockOp("c0")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 150*time.Millisecond {
		t.Fatalf("the lock waited %v after a missed gather", took)
	}
	if groups := f.groupsSeen(); len(groups) != 3 || len(groups[1]) != 2 || len(groups[2]) != 1 {
		t.Fatalf("groups %v", groups)
	}
}

// A lock that no writer took yet becomes its job's success delete in its
// place in the queue; a lock a writer took stays a lock.
func TestGroupCommitLockNotTakenYetIsReplacedByTheDelete(t *testing.T) {
	f := &fakeGroups{gates: map[string]chan struct{}{"2:a": make(chan struct{})}, began: make(chan string, 1)}
	g := newGroupCommit(f.apply, f.apply, func(error) bool { return false }, 0, 1000, 1)
	defer g.close()
	opA := lockOp("a")
	if err := g.enqueue(opA); err != nil {
		t.Fatal(err)
	}
	if got := <-f.began; got != "2:a" {
		t.Fatalf("first group starts with %s", got)
	}
	opB, opC := lockOp("b"), lockOp("c")
	if err := g.enqueue(opB, opC); err != nil {
		t.Fatal(err)
	}
	if g.replaceLock(opA, nil) {
		t.Fatal("the lock being written was replaced")
	}
	if !g.replaceLock(opB, nil) || !opB.DeleteUnlocked() {
		t.Fatal("the queued lock was not replaced")
	}
	if g.replaceLock(opB, nil) {
		t.Fatal("a delete was replaced again")
	}
	close(f.gates["2:a"])
	for _, op := range []*Op{opA, opB, opC} {
		if !g.wait(context.Background(), op) || !op.ok {
			t.Fatalf("%s not answered", op.jid())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	want := [][]string{{"2:a"}, {"3:b", "2:c"}}
	if fmt.Sprint(f.groups) != fmt.Sprint(want) {
		t.Fatalf("groups %v, want %v", f.groups, want)
	}
}

// waitQueue returns once the queue is below its bound, a group at a time.
func TestGroupCommitWaitQueueReturnsOnceTheGroupsAheadAreWritten(t *testing.T) {
	f := &fakeGroups{gates: map[string]chan struct{}{"2:a": make(chan struct{})}, began: make(chan string, 2)}
	g := newGroupCommit(f.apply, f.apply, func(error) bool { return false }, 0, 2, 1)
	defer g.close()
	if err := g.enqueue(lockOp("a")); err != nil {
		t.Fatal(err)
	}
	<-f.began
	ops := []*Op{lockOp("b"), lockOp("c"), lockOp("d")}
	if err := g.enqueue(ops...); err != nil {
		t.Fatal(err)
	}
	g.waitQueue(context.Background(), 4) // 3 queued: at once
	returned := make(chan struct{})
	go func() {
		g.waitQueue(context.Background(), 2)
		close(returned)
	}()
	select {
	case <-returned:
		t.Fatal("returned with 3 writes queued")
	case <-time.After(20 * time.Millisecond):
	}
	close(f.gates["2:a"])
	<-returned
	g.mu.Lock()
	n := len(g.queue)
	g.mu.Unlock()
	if n >= 2 {
		t.Fatalf("%d writes queued after waitQueue(2)", n)
	}
}
