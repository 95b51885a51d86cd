//go:build linux

package sqlite

import (
	"slices"
	"testing"
)

func TestFlockHolders(t *testing.T) {
	const locks = `1: POSIX  ADVISORY  WRITE 100 fd:01:42 0 EOF
2: FLOCK  ADVISORY  READ 101 fd:01:42 0 EOF
3: FLOCK  ADVISORY  WRITE 102 fd:01:43 0 EOF
4: FLOCK  ADVISORY  WRITE 103 00:2f:42 0 EOF
4: -> FLOCK  ADVISORY  WRITE 104 fd:01:42 0 EOF
5: OFDLCK ADVISORY  WRITE -1 fd:01:42 0 EOF
6: FLOCK  ADVISORY  WRITE 105 fd:01:42 0 EOF
garbage
`
	tests := []struct {
		name string
		ino  uint64
		want []int
	}{
		{"granted exclusive flocks on the inode, any device", 42, []int{103, 105}},
		{"another inode", 43, []int{102}},
		{"no lock", 44, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := flockHolders([]byte(locks), tc.ino); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
