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
// SEQ is the PushContext's Seq in decimal, without leading zeros. It is kept
// short because every xDS response carries it twice (version and nonce).
// Versions compare with CompareVersions; their string order does not follow
// Seq ("e-10" < "e-9").
const (
	maxSeqDigits  = 20 // enough for every uint64
	maxEpochLen   = 32
	randomEpochSz = 4 // bytes, 8 hex digits
)

func formatVersion(epoch string, seq uint64) string {
	var buf [maxEpochLen + 1 + maxSeqDigits]byte
	b := append(buf[:0], epoch...)
	b = append(b, '-')
	b = strconv.AppendUint(b, seq, 10)
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
	if digits == "" || len(digits) > 1 && digits[0] == '0' {
		return "", 0, fmt.Errorf("pushcontext: version %q: the sequence must be a decimal number without leading zeros", v)
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
// Compare versions with CompareVersions, not as strings: the sequence is
// not zero padded, so string order differs from Seq order past 9.
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
