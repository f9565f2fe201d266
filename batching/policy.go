package batching

import (
	"fmt"
	"strings"
)

// Policy says what happens to the last global batch of an epoch when the number
// of rows N is not a multiple of the global batch size B.
type Policy int

const (
	// Drop delivers floor(N/B) steps per epoch; the N mod B remainder rows are
	// not delivered (Plan.DroppedRows reports how many).
	Drop Policy = iota
	// Pad delivers ceil(N/B) steps per epoch; the missing rows of the last step
	// are padding (zeros from the cutter) and a boolean mask column tells real
	// rows from padding.
	Pad
	// Raise refuses, at plan time, a dataset whose N is not a multiple of B.
	Raise
)

// policyNames lists the valid policy names in Policy order.
var policyNames = [...]string{Drop: "drop", Pad: "pad", Raise: "raise"}

// String returns the policy's name as ParsePolicy accepts it.
func (p Policy) String() string {
	switch p {
	case Drop, Pad, Raise:
		return policyNames[p]
	default:
		return fmt.Sprintf("Policy(%d)", int(p))
	}
}

// valid reports whether p is one of the defined policies.
func (p Policy) valid() bool {
	switch p {
	case Drop, Pad, Raise:
		return true
	default:
		return false
	}
}

// ParsePolicy returns the policy named s ("drop", "pad" or "raise", case
// insensitive). Any other string is an error wrapping ErrInvalidPolicy that lists
// the valid names.
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "drop":
		return Drop, nil
	case "pad":
		return Pad, nil
	case "raise":
		return Raise, nil
	default:
		return 0, fmt.Errorf("%w %q: valid values are %s", ErrInvalidPolicy, s, strings.Join(policyNames[:], ", "))
	}
}
