package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
)

// The PyTorch peer: tools/bench/torch_peer.py times the idiomatic torch equivalent of each
// case on the same GPU in the same run, so every speed claim stands next to its baseline.

type peerInput struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

type peerCase struct {
	Name    string               `json:"name"`
	Op      string               `json:"op"`
	Params  json.RawMessage      `json:"params"`
	Inputs  map[string]peerInput `json:"inputs"`
	Warmup  int                  `json:"warmup"`
	Repeats int                  `json:"repeats"`
}

// PeerResult is torch's timing of one case.
type PeerResult struct {
	Name      string  `json:"name"`
	Op        string  `json:"op"`
	TorchCall string  `json:"torch_call"`
	MedianMs  float64 `json:"median_ms"`
	MinMs     float64 `json:"min_ms"`
	MaxMs     float64 `json:"max_ms"`
	Repeats   int     `json:"repeats"`
	Error     string  `json:"error"`
}

// PeerReport is the output of torch_peer.py.
type PeerReport struct {
	Torch   string       `json:"torch"`
	CUDA    string       `json:"cuda"`
	Device  string       `json:"device"`
	Results []PeerResult `json:"results"`
}

// ByName indexes the results.
func (r *PeerReport) ByName() map[string]PeerResult {
	m := make(map[string]PeerResult, len(r.Results))
	for _, res := range r.Results {
		m[res.Name] = res
	}
	return m
}

// RunPeer runs the torch peer script with python over cases on a torch device such as
// "cuda:0" (the GPU the kernels ran on).
func RunPeer(python, script, device string, cases []Case, o Options) (*PeerReport, error) {
	var pcs []peerCase
	for _, c := range cases {
		pc := peerCase{Name: c.Name, Op: c.Op, Params: json.RawMessage(c.Params), Inputs: map[string]peerInput{},
			Warmup: o.Warmup, Repeats: o.Repeats}
		for _, in := range c.Inputs {
			pc.Inputs[in.Name] = peerInput{DType: in.DType.String(), Shape: in.Shape}
		}
		pcs = append(pcs, pc)
	}
	input, err := json.Marshal(pcs)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(python, script, "--cases", "-", "--device", device)
	cmd.Stdin = bytes.NewReader(input)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("torch peer %s %s: %w", python, script, err)
	}
	var rep PeerReport
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("torch peer output: %w", err)
	}
	return &rep, nil
}
