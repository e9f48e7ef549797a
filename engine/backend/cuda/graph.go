package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"

	"github.com/touchstone-llm/touchstone/engine/backend"
)

// capture is the state of an open capture (Capture): with guards on, the outputs of every
// recorded op, whose guards each replay checks, since nothing can be read back mid-capture.
type capture struct {
	ops   []capturedOp
	frees []*buffer // freed during the capture: released once it has ended
}

type capturedOp struct {
	op      string
	outputs []arg
}

// Capture records the ops record issues on b into a CUDA graph (ts_graph_begin .. end):
// they are checked and recorded, not run. The library refuses what a capture cannot record
// (a wait, an allocation, a copy to or from the host) with an error naming the call. With
// guards on, each Launch checks the guards of every recorded op's outputs after the replay.
func (b *Backend) Capture(record func(backend.Backend) error) (backend.Graph, error) {
	if err := b.enter("graph_begin"); err != nil {
		return nil, err
	}
	if b.capture != nil {
		return nil, fmt.Errorf("cuda graph_begin: a capture is already open on this backend")
	}
	if err := b.status("graph_begin", C.tsg_graph_begin(b.lib.api, b.e), false); err != nil {
		return nil, err
	}
	c := &capture{}
	b.capture = c
	recErr := record(b)
	b.capture = nil
	var g *C.ts_graph
	endErr := b.status("graph_end", C.tsg_graph_end(b.lib.api, &g, b.e), false)
	for _, d := range c.frees {
		d.release()
	}
	switch {
	case recErr != nil:
		if g != nil {
			_ = b.status("graph_destroy", C.tsg_graph_destroy(b.lib.api, g, b.e), false)
		}
		return nil, recErr
	case endErr != nil:
		return nil, endErr
	}
	b.liveGraphs.Add(1)
	return &graph{b: b, g: g, ops: c.ops}, nil
}

// LiveGraphs counts the graphs captured and not yet freed.
func (b *Backend) LiveGraphs() int64 { return b.liveGraphs.Load() }

var _ backend.Graphs = (*Backend)(nil)

type graph struct {
	b   *Backend
	g   *C.ts_graph
	ops []capturedOp
}

// Launch replays the graph on the library stream, then, with guards on, waits for it and
// checks the guards of every output it wrote.
func (g *graph) Launch() error {
	b := g.b
	if g.g == nil {
		return fmt.Errorf("cuda graph_launch: the graph was freed")
	}
	if err := b.enter("graph_launch"); err != nil {
		return err
	}
	if err := b.status("graph_launch", C.tsg_graph_launch(b.lib.api, g.g, b.e), false); err != nil {
		return err
	}
	b.lastOp = "graph_launch"
	for _, o := range g.ops {
		if err := b.checkGuards(o.op+" (graph replay)", o.outputs); err != nil {
			return err
		}
	}
	return nil
}

// Free destroys the graph; a second Free is a no-op.
func (g *graph) Free() {
	if g.g == nil {
		return
	}
	g.b.liveGraphs.Add(-1)
	if g.b.lib.poison.Load() == nil && !g.b.closed {
		_ = g.b.status("graph_destroy", C.tsg_graph_destroy(g.b.lib.api, g.g, g.b.e), false)
	}
	g.g = nil
}
