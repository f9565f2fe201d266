package tokenize

// Hand-written scanners for the split regexes of the byte-level BPE families.
// Each returns the end of the match that starts at s[i]; the patterns match
// at every position (their last alternatives take any whitespace or any other
// character), so consecutive matches tile the text, which is what Split with
// behavior Isolated turns into words.

// patternKind names a split regex meshfeed implements.
type patternKind int

const (
	patternGPT2   patternKind = iota + 1 // GPT-2, RoBERTa, the ByteLevel pre-tokenizer's own
	patternLlama3                        // Llama 3, cl100k: case-insensitive contractions, \p{N}{1,3}
	patternQwen2                         // Qwen 2: as Llama 3 with single digits
)

// knownPatterns maps a Split regex, exactly as tokenizer.json spells it, to its scanner.
var knownPatterns = map[string]patternKind{
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:                                           patternGPT2,
	`'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:                                              patternGPT2,
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:  patternLlama3,
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:       patternQwen2,
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`: patternLlama3,
	`'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`:        patternLlama3,
}

// scan returns the end of the match of the pattern at s[i] (i < len(s)).
func (k patternKind) scan(s string, i int) int {
	switch k {
	case patternGPT2:
		return scanGPT2(s, i)
	case patternLlama3:
		return scanLlama3(s, i, 3)
	default:
		return scanLlama3(s, i, 1)
	}
}

// contraction returns the length of 's 't 're 've 'm 'll 'd at s[i] (s[i] ==
// '\”), or 0. fold makes it case-insensitive as (?i:) is, including the long s
// (U+017F), which folds to s.
func contraction(s string, i int, fold bool) int {
	if i+1 >= len(s) {
		return 0
	}
	c := s[i+1]
	if fold && c >= 'A' && c <= 'Z' {
		c += 'a' - 'A'
	}
	switch c {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v', 'l':
		if i+2 >= len(s) {
			return 0
		}
		want := byte('e')
		if c == 'l' {
			want = 'l'
		}
		d := s[i+2]
		if fold && d >= 'A' && d <= 'Z' {
			d += 'a' - 'A'
		}
		if d == want {
			return 3
		}
	case 0xC5: // U+017F is C5 BF
		if fold && i+2 < len(s) && s[i+2] == 0xBF {
			return 3
		}
	}
	return 0
}

// runOf returns the end of the run of characters of class want (any bit) from i.
func runOf(s string, i int, want uint8) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c&want == 0 {
			return i
		}
		i += w
	}
	return i
}

// runOther returns the end of the run of characters that are none of \s \p{L} \p{N} from i.
func runOther(s string, i int) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c&(clsL|clsN|clsSpace) != 0 {
			return i
		}
		i += w
	}
	return i
}

// spaceTail matches \s+(?!\S)|\s+ at s[i], a whitespace character: the run
// of whitespace, less its last character when a non-space follows and the
// run is longer than one.
func spaceTail(s string, i, end int) int {
	if end == len(s) {
		return end
	}
	// the last whitespace character before end
	j := end - 1
	for j > i && s[j]&0xC0 == 0x80 {
		j--
	}
	if j > i {
		return j
	}
	return end
}

// scanGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func scanGPT2(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	c, w := classAt(s, i)
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		c, w = classAt(s, i+1)
		j = i + 1
		if c&clsSpace != 0 {
			c, w, j = clsSpace, 1, i
		}
	}
	switch {
	case c&clsL != 0:
		return runOf(s, j+w, clsL)
	case c&clsN != 0:
		return runOf(s, j+w, clsN)
	case c&clsSpace == 0:
		return runOther(s, j+w)
	}
	return spaceTail(s, i, runOf(s, i, clsSpace))
}

// scanLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func scanLlama3(s string, i int, digits int) int {
	if s[i] == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	c, w := classAt(s, i)
	if c&clsL != 0 {
		return runOf(s, i+w, clsL)
	}
	if c&clsN == 0 && s[i] != '\r' && s[i] != '\n' && i+w < len(s) {
		if c2, w2 := classAt(s, i+w); c2&clsL != 0 {
			return runOf(s, i+w+w2, clsL)
		}
	}
	if c&clsN != 0 {
		j := i + w
		for k := 1; k < digits && j < len(s); k++ {
			c2, w2 := classAt(s, j)
			if c2&clsN == 0 {
				break
			}
			j += w2
		}
		return j
	}
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2&(clsL|clsN|clsSpace) == 0 {
			j = i + 1
			c = c2
		}
	}
	if c&clsSpace == 0 {
		j = runOther(s, j)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	end := runOf(s, i, clsSpace)
	for k := end - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	return spaceTail(s, i, end)
}
