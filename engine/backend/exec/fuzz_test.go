package exec

import (
	"strings"
	"testing"
)

// FuzzAdapterLines feeds the decoder and the handshake check arbitrary adapter output: any line
// is either a message or an error, never a panic, and an accepted handshake names known ops.
func FuzzAdapterLines(f *testing.F) {
	f.Add([]byte(`{"type": "hello", "protocol": 1, "name": "numpy-reference", "version": "2.4", "ops": {"rope": {"dtypes": ["f16"]}}}`))
	f.Add([]byte(`{"type": "hello", "protocol": 2, "name": "x", "ops": {}}`))
	f.Add([]byte(`{"type": "result", "id": 3, "status": "unsupported", "reason": "head_dim 80"}`))
	f.Add([]byte(`{"type": "hello", "protocol": 1, "name": "a b", "ops": {"gemm": {}}}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"type": "hello", "protocol": 1, "name": "n", "ops": {"nope": {}}, "extra": 1}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var h helloReply
		if decodeLine(line, &h) == nil && checkHello(h) == nil {
			if h.Protocol != Protocol || h.Name == "" || strings.ContainsAny(h.Name, " \t\n") {
				t.Fatalf("accepted %+v", h)
			}
			for op := range h.Ops {
				if !known(op) {
					t.Fatalf("accepted unknown op %q", op)
				}
			}
		}
		var r resultMsg
		_ = decodeLine(line, &r)
	})
}
