package main

import (
	"errors"
	"testing"
)

// shedFlagErrors are the load shedder's command lines the storefront
// refuses, each with the one line it prints (see wantRefused).
var shedFlagErrors = []struct {
	args []string
	want string
}{
	{[]string{"-max-inflight", "-1"}, `-max-inflight must not be negative, got -1`},
	{[]string{"-max-inflight=-8", "-critical-reserve", "0.5"}, `-max-inflight must not be negative, got -8`},
	{[]string{"-critical-reserve", "0.5"}, `-critical-reserve needs -max-inflight: the reserve is a fraction of the requests the instance serves at once`},
	{[]string{"-critical-reserve", "0"}, `-critical-reserve needs -max-inflight: the reserve is a fraction of the requests the instance serves at once`},
	{[]string{"-max-inflight", "0", "-critical-reserve", "0.25"}, `-critical-reserve needs -max-inflight: the reserve is a fraction of the requests the instance serves at once`},
	{[]string{"-max-inflight", "4", "-critical-reserve", "1"}, `-critical-reserve must be at least 0 and below 1, got 1`},
	{[]string{"-max-inflight", "4", "-critical-reserve", "1.5"}, `-critical-reserve must be at least 0 and below 1, got 1.5`},
	{[]string{"-max-inflight", "4", "-critical-reserve=-0.1"}, `-critical-reserve must be at least 0 and below 1, got -0.1`},
	{[]string{"-max-inflight", "4", "-critical-reserve", "NaN"}, `-critical-reserve must be at least 0 and below 1, got NaN`},
	{[]string{"-critical-reserve", "2"}, `-critical-reserve must be at least 0 and below 1, got 2`},
	// Past float64's range, or not a number at all: out of range too, in
	// one line, not the flag package's error and the whole usage.
	{[]string{"-max-inflight", "4", "-critical-reserve", "1e400"}, `-critical-reserve must be at least 0 and below 1, got 1e400 (+Inf)`},
	{[]string{"-max-inflight", "4", "-critical-reserve", "-1e400"}, `-critical-reserve must be at least 0 and below 1, got -1e400 (-Inf)`},
	{[]string{"-max-inflight", "4", "-critical-reserve", "half"}, `-critical-reserve must be a number at least 0 and below 1, got "half"`},
	// Below 1 as written, 1 once it is a float64: say so.
	{[]string{"-max-inflight", "4", "-critical-reserve", "0.99999999999999999"}, `-critical-reserve must be at least 0 and below 1, got 0.99999999999999999 (1)`},
}

// -max-inflight and -critical-reserve as the shedder gets them.
func TestParseFlagsShed(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want shedConfig
	}{
		{nil, shedConfig{}},
		{[]string{"-max-inflight", "0"}, shedConfig{}},
		{[]string{"-max-inflight", "4"}, shedConfig{maxInflight: 4}},
		{[]string{"-max-inflight", "4", "-critical-reserve", "0.5"}, shedConfig{4, 0.5}},
		{[]string{"-critical-reserve=0", "-max-inflight=1"}, shedConfig{1, 0}},
		{[]string{"-max-inflight", "100", "-critical-reserve", "0.999"}, shedConfig{100, 0.999}},
		{[]string{"-max-inflight", "4", "-critical-reserve", "0.9999999"}, shedConfig{4, 0.9999999}},
		{[]string{"-max-inflight", "4", "-critical-reserve", "-0"}, shedConfig{4, 0}},
		{[]string{"-max-inflight", "4", "-critical-reserve", "0x1p-2"}, shedConfig{4, 0.25}},
	} {
		c, err := parseFlags(tt.args)
		if err != nil {
			t.Errorf("parseFlags(%q): %v", tt.args, err)
			continue
		}
		if c.shed != tt.want {
			t.Errorf("parseFlags(%q): got %+v, want %+v", tt.args, c.shed, tt.want)
		}
		if sh := newShedder(c.shed, nil); (sh != nil) != (tt.want.maxInflight > 0) {
			t.Errorf("parseFlags(%q): shedder %v, want one only with -max-inflight above 0", tt.args, sh)
		}
	}
	for _, tt := range shedFlagErrors {
		_, err := parseFlags(tt.args)
		if err == nil || errors.Is(err, errFlagSyntax) || err.Error() != tt.want {
			t.Errorf("parseFlags(%q): got %v, want %q", tt.args, err, tt.want)
		}
	}
}

// Each refused command line exits 2 with its one line (see
// TestStartupErrorExit2, whose child process runs these too).
func TestShedFlagsExit2(t *testing.T) {
	for _, tt := range shedFlagErrors {
		wantRefused(t, tt.args, tt.want)
	}
}
