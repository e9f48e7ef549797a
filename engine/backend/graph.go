package backend

// Graphs is implemented by backends that can record the ops of a pass once and replay them
// with one launch. A decode step is hundreds of small ops, and issuing each one from the host
// costs more than most of them take on the device; a replay issues them all at once.
type Graphs interface {
	// Capture calls record with the backend to issue ops on, and returns them as a Graph
	// instead of running them. Each op's arguments are checked when it is issued, as usual;
	// what lives in device memory (index data, faults) is checked at every replay. A call
	// that waits for the device, allocates or frees (Alloc, Upload, Download, Write,
	// Synchronize) fails during a capture: buffers are made before and read after. If record
	// returns an error, or the capture fails, Capture returns it and no graph.
	Capture(record func(Backend) error) (Graph, error)
	// LiveGraphs counts the graphs captured and not yet freed: with LiveBuffers, what a
	// leak check judges of this process's own, since device-wide memory moves with whatever
	// else shares the GPU.
	LiveGraphs() int64
}

// Graph is a recorded sequence of ops.
type Graph interface {
	// Launch replays the ops with the buffers and configs they were recorded with, reading
	// what the buffers hold at launch: whatever changes from one replay to the next (a token,
	// a position, a KV-cache row) must be written into a buffer before Launch, never baked
	// into a config or a view's offset.
	Launch() error
	// Free releases the graph (a second Free is a no-op). The buffers it uses stay the
	// caller's and must outlive it.
	Free()
}
