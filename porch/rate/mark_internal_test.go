package rate

import (
	"testing"
	"unsafe"
)

// Every request a limiter counts through its middleware allocates one
// record of the count; naming the RequestURI beside the key and the
// verdict keeps it in the 160-byte size class on a 64-bit platform (176
// costs every counted request 16 bytes more).
func TestCountRecordSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	if got := unsafe.Sizeof(counted{}); got > 160 {
		t.Errorf("a count's record is %d bytes, want at most 160", got)
	}
}
