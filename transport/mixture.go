package transport

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// Mixture is a weighted mixture of datasets (docs/PROTOCOL.md, "Mixtures";
// DESIGN.md, "Mixtures"): every step holds rows of every source in the
// proportions of the weights. A request with a mixture names no datasets,
// columns or shuffle of its own: each source has its own.
type Mixture struct {
	// Sources are the mixture's sources, at least one.
	Sources []MixtureSource `json:"sources"`
	// Stop says when the mixture ends.
	Stop MixtureStop `json:"stop"`
	// SourceColumn, when set, adds an int32 column of that name holding
	// each row's source index (-1 for padding rows).
	SourceColumn string `json:"source_column,omitempty"`
	// History holds the weights of earlier spans of the run, ascending by
	// FromStep, the first from step 0; the sources' weights apply from
	// WeightsFrom on. Empty: the sources' weights apply from step 0.
	History []WeightSpan `json:"history,omitempty"`
	// WeightsFrom is the step from which the sources' weights apply: after
	// the last span of History; 0 without History.
	WeightsFrom int `json:"weights_from,omitempty"`
	// WeightsFromPositions, when set, holds every source's position (rows
	// per slice delivered before step WeightsFrom), as History's spans'
	// Positions.
	WeightsFromPositions []int64 `json:"weights_from_positions,omitempty"`
}

// MixtureSource is one source of a mixture: a dataset as a request names
// one, and its weight.
type MixtureSource struct {
	// Datasets are the source's URIs or globs, at least one.
	Datasets []string `json:"datasets"`
	// Columns projects and shapes the source's columns (names as in its
	// files); empty means every column.
	Columns []Column `json:"columns,omitempty"`
	// Rename maps a column's name in the files to its name in the output,
	// applied after projection and before shaping's output: every source
	// must deliver the same columns after it.
	Rename map[string]string `json:"rename,omitempty"`
	// Shuffle is the source's own shuffling; absent means off.
	Shuffle Shuffle `json:"shuffle,omitzero"`
	// Seed, when set, seeds the source's permutations; absent derives one
	// from the request's seed and the source's sorted datasets.
	Seed *uint64 `json:"seed,omitempty"`
	// Filters keeps only the source's rows the predicate matches, in the
	// same form as the request's Filters (docs/PROTOCOL.md, "Filters"),
	// on the source's column names as in its files; absent keeps every
	// row.
	Filters json.RawMessage `json:"filters,omitempty"`
	// Weight is the source's weight, >= 0 (the weights need not sum to 1;
	// at least one is > 0).
	Weight float64 `json:"weight"`
}

// MixtureStop says when a mixture ends.
type MixtureStop struct {
	// Rule is "num_steps", "first_exhausted" or "all_exhausted".
	Rule string `json:"rule"`
	// NumSteps is the number of steps with rule num_steps.
	NumSteps int `json:"num_steps,omitempty"`
}

// WeightSpan is the weights of a mixture's sources (one per source, in
// source order) from step FromStep on.
type WeightSpan struct {
	FromStep int       `json:"from_step"`
	Weights  []float64 `json:"weights"`
	// Positions, when set, holds every source's position at FromStep (rows
	// per slice delivered before it; 0 for a source added later): the
	// server computes positions from the last span carrying them, so a
	// source removed since need not be in the ticket.
	Positions []int64 `json:"positions,omitempty"`
}

// MaxMixtureSources bounds a mixture's sources.
const MaxMixtureSources = 1024

// validateMixture adds the problems of the mixture field.
//
// Length: one flat list of independent checks, so that every problem of a
// mixture is reported at once.
func (r *Request) validateMixture(p *problems) {
	m := r.Mixture
	if m == nil {
		return
	}
	if len(r.Datasets) > 0 || len(r.Columns) > 0 || r.Shuffle.Enabled || r.Shuffle.Window != 0 {
		p.add("mixture is set together with datasets, columns or shuffle: a mixture's sources carry their own")
	}
	if len(r.Filters) > 0 {
		p.add("filters is set together with mixture: a mixture's sources name their columns differently (rename), so give each meshfeed.Source its own filters (mixture.sources[i].filters)")
	}
	if r.Epochs > 1 || r.Start.Epoch != 0 {
		p.add("mixture: epochs %d, start.epoch %d: a mixture is one pass (its stop rule sets its steps); use epochs 0 or 1 and start.epoch 0", r.Epochs, r.Start.Epoch)
	}
	if r.Elastic != nil && r.Elastic.Epoch != 0 {
		p.add("mixture: elastic.epoch %d: a mixture is one pass, its switch is in epoch 0", r.Elastic.Epoch)
	}
	if len(m.Sources) == 0 {
		p.add("mixture.sources is empty: name at least one source")
	}
	if len(m.Sources) > MaxMixtureSources {
		p.add("mixture has %d sources, over the limit of %d", len(m.Sources), MaxMixtureSources)
	}
	for i, s := range m.Sources {
		var sp problems
		if len(s.Datasets) == 0 {
			sp.add("datasets is empty")
		}
		for j, u := range s.Datasets {
			if u == "" || slices.Contains(s.Datasets[:j], u) {
				sp.add("datasets[%d] %q is empty or listed twice", j, u)
			}
		}
		(&Request{Columns: s.Columns}).validateColumns(&sp)
		out := map[string]string{}
		for from, to := range s.Rename {
			if from == "" || to == "" {
				sp.add("rename %q -> %q: names must not be empty", from, to)
			} else if prev, ok := out[to]; ok {
				sp.add("rename: %q and %q both become %q", prev, from, to)
			}
			out[to] = from
		}
		if s.Shuffle.Window < 0 || s.Shuffle.Window > MaxShuffleWindow {
			sp.add("shuffle.window %d is outside [0, %d]", s.Shuffle.Window, MaxShuffleWindow)
		}
		if s.Shuffle.Window > 0 && !s.Shuffle.Enabled {
			sp.add("shuffle.window is %d but shuffle.enabled is false", s.Shuffle.Window)
		}
		if s.Weight < 0 || math.IsNaN(s.Weight) || math.IsInf(s.Weight, 0) {
			sp.add("weight %v must be a finite number >= 0", s.Weight)
		}
		for _, e := range sp {
			p.add("mixture.sources[%d] (%v): %s", i, s.Datasets, e)
		}
	}
	switch m.Stop.Rule {
	case "num_steps":
		if m.Stop.NumSteps <= 0 {
			p.add("mixture.stop.num_steps %d must be > 0 with rule num_steps", m.Stop.NumSteps)
		}
	case "first_exhausted", "all_exhausted":
		if m.Stop.NumSteps != 0 {
			p.add("mixture.stop.num_steps %d is set with rule %q", m.Stop.NumSteps, m.Stop.Rule)
		}
	default:
		p.add("mixture.stop.rule %q is unknown: want \"num_steps\", \"first_exhausted\" or \"all_exhausted\"", m.Stop.Rule)
	}
	if m.SourceColumn != "" && r.LastBatch == LastBatchPad && m.SourceColumn == r.Mask() {
		p.add("mixture.source_column %q is the mask column's name", m.SourceColumn)
	}
	for j, h := range m.History {
		switch {
		case j == 0 && h.FromStep != 0:
			p.add("mixture.history[0].from_step is %d, want 0", h.FromStep)
		case j > 0 && h.FromStep <= m.History[j-1].FromStep:
			p.add("mixture.history[%d].from_step %d does not ascend", j, h.FromStep)
		}
		if len(h.Weights) != len(m.Sources) {
			p.add("mixture.history[%d] has %d weights for %d sources (a source added later has weight 0 before it)", j, len(h.Weights), len(m.Sources))
		}
		checkPositions(p, fmt.Sprintf("mixture.history[%d].positions", j), h.Positions, len(m.Sources), h.FromStep)
	}
	checkPositions(p, "mixture.weights_from_positions", m.WeightsFromPositions, len(m.Sources), m.WeightsFrom)
	if n := len(m.History); n > 0 && m.WeightsFrom <= m.History[n-1].FromStep {
		p.add("mixture.weights_from %d is not after the last history span (from step %d)", m.WeightsFrom, m.History[n-1].FromStep)
	} else if n == 0 && m.WeightsFrom != 0 {
		p.add("mixture.weights_from %d without history: the weights apply from step 0", m.WeightsFrom)
	}
}

// checkPositions adds the problems of a span's positions: absent, or one
// per source, >= 0, all 0 at step 0.
func checkPositions(p *problems, field string, pos []int64, n, step int) {
	if pos == nil {
		return
	}
	if len(pos) != n {
		p.add("%s has %d positions for %d sources (a source added later has position 0)", field, len(pos), n)
	}
	for i, v := range pos {
		if v < 0 || (step == 0 && v != 0) {
			p.add("%s[%d] is %d: a position is >= 0, and 0 at step 0", field, i, v)
		}
	}
}

// AllDatasets returns every URI the request reads: Datasets and the
// datasets of every mixture source (what the server checks against its
// roots).
func (r *Request) AllDatasets() []string {
	out := slices.Clone(r.Datasets)
	if r.Mixture != nil {
		for _, s := range r.Mixture.Sources {
			out = append(out, s.Datasets...)
		}
	}
	return out
}
