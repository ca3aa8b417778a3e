package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/contract"
	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// sidejobCommand is `gojob sidejob …`: operator commands for SideJob jobs
// (the Ruby sidejob gem's data, 4.1.0 layout).
func sidejobCommand(o *options) *ucli.Command {
	_ = o
	withFlags := func(extra ...ucli.Flag) []ucli.Flag {
		return append([]ucli.Flag{newRedisFlag(), newJSONFlag()}, extra...)
	}
	return &ucli.Command{
		Name:  "sidejob",
		Usage: "inspect and drive SideJob jobs (data shared with the Ruby sidejob gem 4.1.0)",
		Description: `SideJob jobs have a status, input and output ports, channels, children and
a log. These commands read and change them in Redis exactly as the Ruby gem
does. JOB is a job id or alias. Values are JSON; text that is not JSON is a
string. Workers are served by a Go binary that registers them (see the
sidejob package and examples/sidejob-pipeline) with "work -q QUEUE".`,
		Subcommands: []*ucli.Command{
			{
				Name: "create", Usage: "create a job and queue its first run", ArgsUsage: "QUEUE CLASS [ARG...]",
				Flags: withFlags(
					&ucli.StringFlag{Name: "parent", Usage: "parent JOB (needs --name)"},
					&ucli.StringFlag{Name: "name", Usage: "child name under --parent"},
					&ucli.StringFlag{Name: "by", Usage: "created_by text"},
					&ucli.StringFlag{Name: "at", Usage: "first run at (RFC 3339 or epoch seconds)"},
					&ucli.DurationFlag{Name: "in", Usage: "first run after this delay"},
					&ucli.StringFlag{Name: "inports", Usage: `extra inports, JSON: {"name":{"default":V,"channels":["/c"]}}`},
					&ucli.StringFlag{Name: "outports", Usage: "extra outports, JSON (as --inports)"},
					&ucli.StringFlag{Name: "alias", Usage: "give the job this alias"},
				),
				Action: withSideJob(sjCreate),
			},
			{Name: "show", Usage: "show a job: status, info, ports, children, state", ArgsUsage: "JOB", Flags: withFlags(), Action: withSideJob(sjShow)},
			{Name: "tree", Usage: "show jobs as a tree of parents and children", ArgsUsage: "[JOB]", Flags: withFlags(), Action: withSideJob(sjTree)},
			{Name: "ports", Usage: "list a job's ports with size, default and channels", ArgsUsage: "JOB", Flags: withFlags(), Action: withSideJob(sjPorts)},
			{
				Name: "write", Usage: "write values to a port (runs the job, or its parent for an outport)", ArgsUsage: "JOB PORT VALUE...",
				Flags:  withFlags(&ucli.BoolFlag{Name: "out", Usage: "PORT is an outport"}, &ucli.BoolFlag{Name: "default", Usage: "set the port's default instead"}),
				Action: withSideJob(sjWrite),
			},
			{
				Name: "read", Usage: "read (and consume) the next value of a port", ArgsUsage: "JOB PORT",
				Flags: withFlags(&ucli.BoolFlag{Name: "out", Usage: "PORT is an outport"}), Action: withSideJob(sjRead),
			},
			{
				Name: "run", Usage: "request a run of a job", ArgsUsage: "JOB",
				Flags: withFlags(&ucli.BoolFlag{Name: "force", Usage: "run even when failed, terminating or terminated"},
					&ucli.StringFlag{Name: "at", Usage: "run at (RFC 3339 or epoch seconds)"},
					&ucli.DurationFlag{Name: "in", Usage: "run after this delay"}),
				Action: withSideJob(sjRun),
			},
			{
				Name: "terminate", Usage: "terminate a job (its shutdown hook runs on a worker)", ArgsUsage: "JOB",
				Flags: withFlags(&ucli.BoolFlag{Name: "recursive", Usage: "terminate its descendants too"}), Action: withSideJob(sjTerminate),
			},
			{Name: "delete", Usage: "delete a terminated job and its descendants", ArgsUsage: "JOB", Flags: withFlags(), Action: withSideJob(sjDelete)},
			{
				Name: "publish", Usage: "publish a message to a channel", ArgsUsage: "CHANNEL VALUE",
				Flags: withFlags(), Action: withSideJob(sjPublish),
			},
			{
				Name: "log", Usage: "write a log message, or follow /sidejob/log", ArgsUsage: "[MESSAGE]",
				Flags:  withFlags(&ucli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "print log entries as they are published until interrupted"}),
				Action: withSideJob(sjLog),
			},
		},
	}
}

func sjTime(s string, in time.Duration) (time.Time, error) {
	if s == "" {
		if in > 0 {
			return time.Now().Add(in), nil
		}
		return time.Time{}, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return contract.FromEpochSeconds(f), nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

func sjCreate(ctx context.Context, e *sjEnv) error {
	args := e.c.Args().Slice()
	if len(args) < 2 {
		return ucli.Exit("create: QUEUE and CLASS are required", exitUsage)
	}
	o := &sidejob.QueueOpts{By: e.c.String("by"), Name: e.c.String("name")}
	for _, a := range args[2:] {
		o.Args = append(o.Args, jsonArg(a))
	}
	at, err := sjTime(e.c.String("at"), e.c.Duration("in"))
	if err != nil {
		return ucli.Exit("create: --at: "+err.Error(), exitUsage)
	}
	o.At = at
	for flag, dst := range map[string]*string{"inports": &o.Inports, "outports": &o.Outports} {
		if s := e.c.String(flag); s != "" {
			if err := checkPortsJSON(s); err != nil {
				return ucli.Exit(fmt.Sprintf("create: --%s: %v", flag, err), exitUsage)
			}
			*dst = s
		}
	}
	if ref := e.c.String("parent"); ref != "" {
		p, err := e.sj.Find(ctx, ref)
		if err != nil {
			return err
		}
		if p == nil {
			return ucli.Exit("create: no parent job "+ref, exitNotFound)
		}
		o.Parent = p
		o.By = cmpOr(o.By, p.String())
	}
	j, err := e.sj.Queue(ctx, args[0], args[1], o)
	if err != nil {
		return err
	}
	if a := e.c.String("alias"); a != "" {
		if err := j.AddAlias(ctx, a); err != nil {
			return err
		}
	}
	if e.json {
		return e.printJSON(map[string]any{"job": j.ID()})
	}
	fmt.Fprintf(e.out, "created job %d (%s in %s)\n", j.ID(), args[1], args[0])
	return nil
}

// checkPortsJSON checks a --inports or --outports value: a JSON object of
// port name to options (or null), as sidejob.QueueOpts takes it.
func checkPortsJSON(s string) error {
	v, err := rubyjson.Parse([]byte(s))
	if err != nil {
		return fmt.Errorf("sidejob: ports: %w", err)
	}
	if _, ok := v.Map(); !ok && v.Kind() != rubyjson.Null {
		return fmt.Errorf("sidejob: ports must be an object, got %s", v.Kind())
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func sjShow(ctx context.Context, e *sjEnv) error {
	j, err := e.job(ctx, 0)
	if err != nil {
		return err
	}
	info, err := j.Info(ctx)
	if err != nil {
		return err
	}
	status, aliases := info.Status, info.Aliases
	parent, err := j.Parent(ctx)
	if err != nil {
		return err
	}
	children, err := j.Children(ctx)
	if err != nil {
		return err
	}
	state, err := j.State(ctx)
	if err != nil {
		return err
	}
	ports, err := portViews(ctx, e, j)
	if err != nil {
		return err
	}
	if e.json {
		kids := map[string]int64{}
		for name, c := range children {
			kids[name] = c.ID()
		}
		var pid any
		if parent != nil {
			pid = parent.ID()
		}
		return e.printJSON(map[string]any{
			"job": j.ID(), "status": status, "queue": info.Queue, "class": info.Class,
			"args": json.RawMessage(info.Args.Encode()), "created_by": info.CreatedBy,
			"created_at": info.CreatedAt, "ran_at": info.RanAt, "aliases": aliases,
			"parent": pid, "children": kids, "state": json.RawMessage(state.Encode()), "ports": ports,
		})
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "job\t%d\nstatus\t%s\nworker\t%s (queue %s)\nargs\t%s\n", j.ID(), status, info.Class, info.Queue, info.Args.Encode())
	fmt.Fprintf(tw, "created\t%s by %q\nran at\t%s\n", sidejobTextTime(info.CreatedAt), info.CreatedBy, cmpOr(sidejobTextTime(info.RanAt), "never"))
	if len(aliases) > 0 {
		fmt.Fprintf(tw, "aliases\t%s\n", strings.Join(aliases, ", "))
	}
	if parent != nil {
		fmt.Fprintf(tw, "parent\t%d\n", parent.ID())
	}
	for _, name := range childNames(children) {
		fmt.Fprintf(tw, "child\t%s = %d\n", name, children[name].ID())
	}
	for i := 0; i < state.Len(); i++ {
		k, v := state.At(i)
		fmt.Fprintf(tw, "state\t%s = %s\n", k, v.Encode())
	}
	tw.Flush()
	return printPorts(e.out, ports)
}

// treeNode is one job of the tree.
type treeNode struct {
	Job      int64       `json:"job"`
	Name     string      `json:"name,omitempty"`
	Class    string      `json:"class"`
	Status   string      `json:"status"`
	Children []*treeNode `json:"children,omitempty"`
}

func buildTree(ctx context.Context, j *sidejob.Job, name string, depth int) (*treeNode, error) {
	info, err := j.Info(ctx)
	if err != nil {
		return nil, err
	}
	n := &treeNode{Job: j.ID(), Name: name, Class: info.Class, Status: info.Status}
	if depth > 64 {
		return n, nil
	}
	children, err := j.Children(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range childNames(children) {
		cn, err := buildTree(ctx, children[name], name, depth+1)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, cn)
	}
	return n, nil
}

// childNames returns the names of children in the order their jobs were
// created (by id).
func childNames(children map[string]*sidejob.Job) []string {
	names := slices.Collect(maps.Keys(children))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(children[a].ID(), children[b].ID()), strings.Compare(a, b))
	})
	return names
}

func sjTree(ctx context.Context, e *sjEnv) error {
	var roots []*sidejob.Job
	if e.c.Args().Len() > 0 {
		j, err := e.job(ctx, 0)
		if err != nil {
			return err
		}
		roots = append(roots, j)
	} else {
		ids, err := e.jobIDs(ctx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			j, err := e.sj.Find(ctx, strconv.FormatInt(id, 10))
			if err != nil {
				return err
			}
			if j == nil {
				continue // deleted meanwhile
			}
			p, err := j.Parent(ctx)
			if err != nil {
				return err
			}
			if p == nil {
				roots = append(roots, j)
			}
		}
	}
	nodes := []*treeNode{}
	for _, r := range roots {
		n, err := buildTree(ctx, r, "", 0)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	if e.json {
		return e.printJSON(nodes)
	}
	if len(nodes) == 0 {
		fmt.Fprintln(e.out, "no jobs")
		return nil
	}
	var walk func(n *treeNode, prefix string, last, root bool)
	walk = func(n *treeNode, prefix string, last, root bool) {
		branch, next := "", ""
		if !root {
			branch, next = "├── ", "│   "
			if last {
				branch, next = "└── ", "    "
			}
		}
		label := fmt.Sprintf("%d %s [%s]", n.Job, n.Class, n.Status)
		if n.Name != "" {
			label = n.Name + ": " + label
		}
		fmt.Fprintf(e.out, "%s%s%s\n", prefix, branch, label)
		for i, c := range n.Children {
			walk(c, prefix+next, i == len(n.Children)-1, false)
		}
	}
	for _, n := range nodes {
		walk(n, "", true, true)
	}
	return nil
}

func sjRun(ctx context.Context, e *sjEnv) error {
	j, err := e.job(ctx, 0)
	if err != nil {
		return err
	}
	at, err := sjTime(e.c.String("at"), e.c.Duration("in"))
	if err != nil {
		return ucli.Exit("run: --at: "+err.Error(), exitUsage)
	}
	got, err := j.Run(ctx, &sidejob.RunOpts{Force: e.c.Bool("force"), At: at})
	if err != nil {
		return err
	}
	info, err := j.Info(ctx)
	if err != nil {
		return err
	}
	status := info.Status
	if e.json {
		return e.printJSON(map[string]any{"job": j.ID(), "run": got != nil, "status": status})
	}
	if got == nil {
		fmt.Fprintf(e.out, "job %d not run: status %s (use --force)\n", j.ID(), status)
		return nil
	}
	fmt.Fprintf(e.out, "job %d queued\n", j.ID())
	return nil
}

func sjTerminate(ctx context.Context, e *sjEnv) error {
	j, err := e.job(ctx, 0)
	if err != nil {
		return err
	}
	if err := j.Terminate(ctx, e.c.Bool("recursive")); err != nil {
		return err
	}
	info, err := j.Info(ctx)
	if err != nil {
		return err
	}
	status := info.Status
	if e.json {
		return e.printJSON(map[string]any{"job": j.ID(), "status": status})
	}
	fmt.Fprintf(e.out, "job %d %s\n", j.ID(), status)
	return nil
}

func sjDelete(ctx context.Context, e *sjEnv) error {
	j, err := e.job(ctx, 0)
	if err != nil {
		return err
	}
	ok, err := j.Delete(ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(map[string]any{"job": j.ID(), "deleted": ok})
	}
	if !ok {
		return ucli.Exit(fmt.Sprintf("job %d not deleted: it and all its descendants must be terminated (gojob sidejob terminate --recursive)", j.ID()), exitRefused)
	}
	fmt.Fprintf(e.out, "deleted job %d\n", j.ID())
	return nil
}

// sidejobTextTime prints a SideJob timestamp (RFC 3339 with nanoseconds,
// as the gem writes it) as the CLI's text prints times; one it cannot read
// as is, and "" as "".
func sidejobTextTime(s string) string {
	t, err := sidejobwire.ParseTimestamp(s)
	if s == "" || err != nil {
		return s
	}
	return textTime(t)
}
