package pushcontext

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// A version has the form EPOCH "-" SEQ: EPOCH identifies the Builder (1 to
// 32 ASCII letters or digits, random unless BuilderConfig.Epoch sets it) and
// SEQ is the PushContext's Seq as exactly seqDigits decimal digits, zero
// padded. Within one epoch, versions compare as strings in the order of
// their Seq.
const (
	seqDigits     = 20 // enough for every uint64
	maxEpochLen   = 32
	randomEpochSz = 8 // bytes, 16 hex digits
)

func formatVersion(epoch string, seq uint64) string {
	var buf [maxEpochLen + 1 + seqDigits]byte
	b := append(buf[:0], epoch...)
	b = append(b, '-')
	var digits [seqDigits]byte
	d := strconv.AppendUint(digits[:0], seq, 10)
	for range seqDigits - len(d) {
		b = append(b, '0')
	}
	b = append(b, d...)
	return string(b)
}

func validateEpoch(epoch string) error {
	if epoch == "" || len(epoch) > maxEpochLen {
		return fmt.Errorf("pushcontext: epoch %q must have 1 to %d characters", epoch, maxEpochLen)
	}
	for i := 0; i < len(epoch); i++ {
		c := epoch[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return fmt.Errorf("pushcontext: epoch %q may hold only ASCII letters and digits", epoch)
		}
	}
	return nil
}

func randomEpoch() string {
	var b [randomEpochSz]byte
	// crypto/rand.Read never returns an error (it crashes the program if
	// the system's random source fails).
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ParseVersion splits a version returned by PushContext.Version into the
// epoch of its Builder and its sequence number.
func ParseVersion(v string) (epoch string, seq uint64, err error) {
	i := strings.LastIndexByte(v, '-')
	if i < 0 {
		return "", 0, fmt.Errorf("pushcontext: version %q has no '-'", v)
	}
	epoch, digits := v[:i], v[i+1:]
	if err := validateEpoch(epoch); err != nil {
		return "", 0, fmt.Errorf("pushcontext: version %q: bad epoch", v)
	}
	if len(digits) != seqDigits {
		return "", 0, fmt.Errorf("pushcontext: version %q: sequence must have %d digits", v, seqDigits)
	}
	seq, err = strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("pushcontext: version %q: bad sequence", v)
	}
	return epoch, seq, nil
}

// CompareVersions compares two versions of the same Builder: it returns -1
// if a is older than b, 0 if they are equal and +1 if a is newer. Versions of
// different Builders (different epochs) have no order, and CompareVersions
// returns an error for them, as it does for a string that is not a version.
//
// For versions of one Builder, comparing the strings themselves gives the
// same answer; CompareVersions also checks that they are comparable at all.
func CompareVersions(a, b string) (int, error) {
	ea, sa, err := ParseVersion(a)
	if err != nil {
		return 0, err
	}
	eb, sb, err := ParseVersion(b)
	if err != nil {
		return 0, err
	}
	if ea != eb {
		return 0, fmt.Errorf("pushcontext: versions %q and %q come from different builders", a, b)
	}
	switch {
	case sa < sb:
		return -1, nil
	case sa > sb:
		return 1, nil
	}
	return 0, nil
}
