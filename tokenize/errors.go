package tokenize

import "errors"

var (
	// ErrUnsupported marks a tokenizer.json component meshfeed does not
	// implement; the message names the component and its place in the file.
	ErrUnsupported = errors.New("not supported")
	// ErrMalformed marks a tokenizer.json that is not valid JSON or does not
	// have the shape the reference library writes.
	ErrMalformed = errors.New("malformed tokenizer.json")
	// ErrInvalidUTF8 marks text that is not valid UTF-8: the reference
	// library's Python API cannot be given such text, so meshfeed refuses it
	// rather than guess a repair.
	ErrInvalidUTF8 = errors.New("text is not valid UTF-8")
)
