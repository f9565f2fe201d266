package filter

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Kind is the kind of a filter value, as the ticket types it.
type Kind int

const (
	// Null is JSON null (Python None).
	Null Kind = iota
	// Bool is true or false.
	Bool
	// Int is a JSON number without fraction or exponent, of any size.
	Int
	// Float is a JSON number with a fraction or exponent, or {"float":
	// "nan" | "inf" | "-inf"}.
	Float
	// String is a JSON string.
	String
	// Bytes is {"bytes": base64}.
	Bytes
	// Decimal is {"decimal": "-12.345"}: an exact decimal.
	Decimal
	// Timestamp is {"timestamp": ISO 8601}: naive ("2020-01-02T03:04:05.5")
	// or with an offset ("...Z", "...+02:00").
	Timestamp
	// Date is {"date": "2020-01-02"}.
	Date
)

var kindNames = [...]string{Null: "null", Bool: "bool", Int: "int", Float: "float", String: "string", Bytes: "bytes", Decimal: "decimal", Timestamp: "timestamp", Date: "date"}

// String names the kind.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Value is one typed filter value.
type Value struct {
	Kind Kind
	// B is a Bool's value.
	B bool
	// F is a Float's value (NaN and infinities included).
	F float64
	// S is a String's or Bytes's value.
	S string
	// Rat is the exact value of an Int, a finite Float, a Decimal, a
	// Timestamp (seconds since the Unix epoch, UTC) or a Date (days since
	// the epoch).
	Rat *big.Rat
	// TZ is true for a Timestamp given with an offset.
	TZ   bool
	text string // the canonical JSON form
}

func (v Value) canonical() string { return v.text }

// String renders the value for error messages.
func (v Value) String() string { return v.text }

var timeLayouts = []string{"2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04Z07:00", "2006-01-02T15:04"}

// parseValue reads one typed value.
//
// Length: one case per kind of the ticket's value forms, each short.
func parseValue(raw json.RawMessage) (Value, error) {
	raw = bytes.TrimSpace(raw)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return Value{}, fmt.Errorf("value %s is not JSON: %v", abbrev(raw), err)
	}
	switch x := x.(type) {
	case nil:
		return Value{Kind: Null, text: "null"}, nil
	case bool:
		return Value{Kind: Bool, B: x, text: strconv.FormatBool(x)}, nil
	case string:
		t, _ := json.Marshal(x)
		return Value{Kind: String, S: x, text: string(t)}, nil
	case json.Number:
		s := x.String()
		if !strings.ContainsAny(s, ".eE") {
			r, ok := new(big.Rat).SetString(s)
			if !ok {
				return Value{}, fmt.Errorf("value %s is not an integer", s)
			}
			return Value{Kind: Int, Rat: r, text: r.Num().String()}, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return Value{}, fmt.Errorf("value %s is not a float64: %v", s, err)
		}
		return floatValue(f), nil
	case map[string]any:
		if len(x) != 1 {
			return Value{}, fmt.Errorf("value %s: a typed value is an object with one key: float, decimal, timestamp, date or bytes", abbrev(raw))
		}
		for k, v := range x {
			return typedValue(k, v, raw)
		}
	}
	return Value{}, fmt.Errorf("value %s: want null, a bool, a number, a string or a typed object ({\"decimal\": \"1.5\"}, {\"timestamp\": \"2020-01-02T03:04:05\"}, {\"date\": \"2020-01-02\"}, {\"bytes\": base64}, {\"float\": \"nan\"})", abbrev(raw))
}

// floatValue is the Value of f.
func floatValue(f float64) Value {
	v := Value{Kind: Float, F: f}
	switch {
	case math.IsNaN(f):
		v.text = `{"float":"nan"}`
	case math.IsInf(f, 1):
		v.text = `{"float":"inf"}`
	case math.IsInf(f, -1):
		v.text = `{"float":"-inf"}`
	default:
		v.Rat = new(big.Rat).SetFloat64(f)
		v.text = strconv.FormatFloat(f, 'g', -1, 64)
		if !strings.ContainsAny(v.text, ".eE") {
			v.text += ".0"
		}
	}
	return v
}

// typedValue reads the object form {key: v}.
func typedValue(key string, v any, raw json.RawMessage) (Value, error) {
	s, isStr := v.(string)
	if n, ok := v.(json.Number); ok && key == "float" {
		s, isStr = n.String(), true
	}
	if !isStr {
		return Value{}, fmt.Errorf("value %s: the %q form holds a string", abbrev(raw), key)
	}
	switch key {
	case "float":
		switch strings.ToLower(s) {
		case "nan":
			return floatValue(math.NaN()), nil
		case "inf", "+inf", "infinity":
			return floatValue(math.Inf(1)), nil
		case "-inf", "-infinity":
			return floatValue(math.Inf(-1)), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return Value{}, fmt.Errorf("value %s: not a float", abbrev(raw))
		}
		return floatValue(f), nil
	case "decimal":
		r, ok := new(big.Rat).SetString(s)
		if !ok || strings.ContainsAny(s, "/") {
			return Value{}, fmt.Errorf("value %s: %q is not a decimal number", abbrev(raw), s)
		}
		t, _ := json.Marshal(s)
		return Value{Kind: Decimal, Rat: r, text: `{"decimal":` + string(t) + `}`}, nil
	case "bytes":
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return Value{}, fmt.Errorf("value %s: not standard base64: %v", abbrev(raw), err)
		}
		return Value{Kind: Bytes, S: string(b), text: `{"bytes":"` + s + `"}`}, nil
	case "date":
		d, err := time.Parse("2006-01-02", s)
		if err != nil {
			return Value{}, fmt.Errorf("value %s: want a date YYYY-MM-DD: %v", abbrev(raw), err)
		}
		days := d.Unix() / 86400
		return Value{Kind: Date, Rat: new(big.Rat).SetInt64(days), text: `{"date":"` + s + `"}`}, nil
	case "timestamp":
		for _, layout := range timeLayouts {
			t, err := time.Parse(layout, s)
			if err != nil {
				continue
			}
			r := new(big.Rat).Add(new(big.Rat).SetInt64(t.Unix()), big.NewRat(int64(t.Nanosecond()), 1e9))
			tz := strings.Contains(layout, "Z07")
			q, _ := json.Marshal(s)
			return Value{Kind: Timestamp, Rat: r, TZ: tz, text: `{"timestamp":` + string(q) + `}`}, nil
		}
		return Value{}, fmt.Errorf("value %s: want an ISO 8601 timestamp, e.g. 2020-01-02T03:04:05.123456, optionally with Z or an offset", abbrev(raw))
	}
	return Value{}, fmt.Errorf("value %s: unknown typed form %q (want float, decimal, timestamp, date or bytes)", abbrev(raw), key)
}
