package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidejob"
)

// portView is a port as show and ports print it.
type portView struct {
	Type     string          `json:"type"`
	Name     string          `json:"name"`
	Size     int64           `json:"size"`
	Default  json.RawMessage `json:"default,omitempty"`
	Channels []string        `json:"channels,omitempty"`
}

func portViews(ctx context.Context, e *sjEnv, j *sidejob.Job) ([]portView, error) {
	conn, err := e.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ports, err := sidejobwire.Ports(ctx, conn, j.ID())
	if err != nil {
		return nil, err
	}
	var out []portView
	for _, p := range ports {
		v := portView{Type: p.Type, Name: p.Name, Size: p.Size, Channels: p.Channels}
		if p.HasDefault {
			v.Default = p.Default.Encode()
		}
		out = append(out, v)
	}
	return out, nil
}

func printPorts(w io.Writer, ports []portView) error {
	if len(ports) == 0 {
		fmt.Fprintln(w, "no ports")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PORT\tSIZE\tDEFAULT\tCHANNELS")
	for _, p := range ports {
		def := "-"
		if p.Default != nil {
			def = string(p.Default)
		}
		fmt.Fprintf(tw, "%s:%s\t%d\t%s\t%s\n", p.Type, p.Name, p.Size, def, strings.Join(p.Channels, ","))
	}
	return tw.Flush()
}

func sjPorts(ctx context.Context, e *sjEnv) error {
	j, err := e.job(ctx, 0)
	if err != nil {
		return err
	}
	ports, err := portViews(ctx, e, j)
	if err != nil {
		return err
	}
	if e.json {
		if ports == nil {
			ports = []portView{}
		}
		return e.printJSON(ports)
	}
	return printPorts(e.out, ports)
}

func (e *sjEnv) port(ctx context.Context) (*sidejob.Port, error) {
	j, err := e.job(ctx, 0)
	if err != nil {
		return nil, err
	}
	name := e.c.Args().Get(1)
	if name == "" {
		return nil, ucli.Exit(e.c.Command.Name+": PORT is required", exitUsage)
	}
	if e.c.Bool("out") {
		return j.Output(ctx, name)
	}
	return j.Input(ctx, name)
}

func sjWrite(ctx context.Context, e *sjEnv) error {
	p, err := e.port(ctx)
	if err != nil {
		return err
	}
	vals := e.c.Args().Slice()[2:]
	if len(vals) == 0 {
		return ucli.Exit("write: VALUE is required", exitUsage)
	}
	for _, s := range vals {
		v := jsonArg(s)
		if e.c.Bool("default") {
			err = p.SetDefault(ctx, v)
		} else {
			err = p.Write(ctx, v)
		}
		if err != nil {
			return err
		}
	}
	if e.json {
		return e.printJSON(map[string]any{"port": p.String(), "written": len(vals)})
	}
	fmt.Fprintf(e.out, "wrote %d value(s) to %s\n", len(vals), p)
	return nil
}

func sjRead(ctx context.Context, e *sjEnv) error {
	p, err := e.port(ctx)
	if err != nil {
		return err
	}
	d, err := p.Read(ctx)
	if err != nil {
		return err
	}
	if d == nil {
		if e.json {
			return e.printJSON(map[string]any{"port": p.String(), "none": true})
		}
		fmt.Fprintln(e.out, "(no data)")
		return nil
	}
	if e.json {
		return e.printJSON(map[string]any{"port": p.String(), "data": json.RawMessage(d.Value.Encode()), "context": json.RawMessage(d.Context.Encode())})
	}
	fmt.Fprintln(e.out, string(d.Value.Encode()))
	return nil
}
