package web

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"

	"github.com/gojob/gojob/internal/sidejobwire"
	"github.com/gojob/gojob/sidejob"
	"github.com/gojob/gojob/sidekiq/rubyjson"
)

// treeLimit bounds the jobs the SideJob page walks.
const treeLimit = 500

type sjNode struct {
	ID       int64
	Name     string
	Class    string
	Queue    string
	Status   string
	Children []*sjNode
}

type sjTreeData struct {
	Roots   []*sjNode
	Total   int
	Limited bool
}

func (h *handler) sidejobTree(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ids, err := h.sjJobIDs(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := &sjTreeData{Total: len(ids)}
	seen := 0
	for _, id := range ids {
		if seen >= treeLimit {
			d.Limited = true
			break
		}
		j, err := h.sj.Find(ctx, strconv.FormatInt(id, 10))
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if j == nil {
			continue // deleted meanwhile
		}
		p, err := j.Parent(ctx)
		if err != nil {
			if isGone(err) {
				continue
			}
			h.fail(w, r, err)
			return
		}
		if p != nil {
			continue
		}
		n, err := h.sjNode(ctx, j, "", 0, &seen)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if n != nil {
			d.Roots = append(d.Roots, n)
		}
	}
	h.render(w, r, "sidejob", "SideJob", "sidejob", d)
}

// sjJobIDs returns the ids of all live SideJob jobs, in ascending order.
func (h *handler) sjJobIDs(ctx context.Context) ([]int64, error) {
	conn, err := h.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return sidejobwire.JobIDs(ctx, conn)
}

// isGone reports an error about a job deleted while the page was built.
func isGone(err error) bool {
	return errors.Is(err, sidejob.ErrJobNotFound)
}

func (h *handler) sjNode(ctx context.Context, j *sidejob.Job, name string, depth int, seen *int) (*sjNode, error) {
	*seen++
	info, err := j.Info(ctx)
	if err != nil {
		if isGone(err) {
			return nil, nil
		}
		return nil, err
	}
	n := &sjNode{ID: j.ID(), Name: name, Class: info.Class, Queue: info.Queue, Status: info.Status}
	if depth > 32 || *seen >= treeLimit {
		return n, nil
	}
	kids, err := j.Children(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range sjChildren(kids) {
		cn, err := h.sjNode(ctx, kids[c.Name], c.Name, depth+1, seen)
		if err != nil {
			return nil, err
		}
		if cn != nil {
			n.Children = append(n.Children, cn)
		}
	}
	return n, nil
}

type sjPortView struct {
	Type, Name string
	Size       int64
	Default    string
	HasDefault bool
	Channels   []string
	// Data are the first values waiting in the port, oldest first (read
	// without consuming them).
	Data []string
	// More is set when more values wait than Data shows.
	More bool
}

// sjChild is a child job as the job page links it.
type sjChild struct {
	Name string
	ID   int64
}

// sjChildren returns children in the order their jobs were created (by
// id).
func sjChildren(kids map[string]*sidejob.Job) []sjChild {
	out := make([]sjChild, 0, len(kids))
	for name, j := range kids {
		out = append(out, sjChild{Name: name, ID: j.ID()})
	}
	slices.SortFunc(out, func(a, b sjChild) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), strings.Compare(a.Name, b.Name))
	})
	return out
}

type sjJobData struct {
	ID       int64
	Info     *sidejob.Info
	Parent   int64
	Children []sjChild
	// State is the job's state hash, key and JSON value.
	State [][2]string
	Ports []sjPortView
}

// portPeek is how many waiting values a port shows.
const portPeek = 10

func (h *handler) sidejobJob(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		notFound(w, "SideJob job "+strconv.Quote(r.PathValue("id")))
		return
	}
	j, err := h.sj.Find(ctx, strconv.FormatInt(id, 10))
	if err == nil && j == nil {
		notFound(w, "SideJob job "+strconv.FormatInt(id, 10))
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := &sjJobData{ID: id}
	if d.Info, err = j.Info(ctx); err != nil {
		if isGone(err) {
			notFound(w, "SideJob job "+strconv.FormatInt(id, 10))
			return
		}
		h.fail(w, r, err)
		return
	}
	var p *sidejob.Job
	if p, err = j.Parent(ctx); err == nil && p != nil {
		d.Parent = p.ID()
	}
	if err == nil {
		var kids map[string]*sidejob.Job
		if kids, err = j.Children(ctx); err == nil {
			d.Children = sjChildren(kids)
			var st *rubyjson.Map
			if st, err = j.State(ctx); err == nil {
				for i := range st.Len() {
					k, v := st.At(i)
					d.State = append(d.State, [2]string{k, string(v.Encode())})
				}
				d.Ports, err = h.sjPorts(ctx, j)
			}
		}
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "sidejob_job", "SideJob job "+strconv.FormatInt(id, 10), "sidejob", d)
}

func (h *handler) sjPorts(ctx context.Context, j *sidejob.Job) ([]sjPortView, error) {
	conn, err := h.cfg.Pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ports, err := sidejobwire.Ports(ctx, conn, j.ID())
	if err != nil {
		return nil, err
	}
	var out []sjPortView
	for _, p := range ports {
		v := sjPortView{Type: p.Type, Name: p.Name, Size: p.Size, Channels: p.Channels}
		if p.HasDefault {
			v.HasDefault, v.Default = true, string(p.Default.Encode())
		}
		if v.Data, err = peekPort(ctx, conn, sidejobwire.PortKey(j.ID(), p.Type, p.Name)); err != nil {
			return nil, err
		}
		v.More = v.Size > int64(len(v.Data))
		out = append(out, v)
	}
	return out, nil
}

// peekPort reads the first waiting values of a port's data list (LRANGE;
// a read pops from the same end) without consuming them.
func peekPort(ctx context.Context, conn redis.Conn, key string) ([]string, error) {
	raws, err := redis.ByteSlices(redis.DoContext(conn, ctx, "LRANGE", key, 0, portPeek-1))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(raws))
	for i, raw := range raws {
		if v, _, _, err := sidejobwire.DecodeEnvelope(raw); err == nil {
			out[i] = string(v.Encode())
		} else {
			out[i] = string(raw)
		}
	}
	return out, nil
}
