package idem

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/writeonce/porch-go/porch/internal/clientip"
	"github.com/writeonce/porch-go/porch/internal/logctx"
)

// maxKeyLen is the longest key accepted, in bytes.
const maxKeyLen = 255

var (
	errKeyMissing  = errors.New("no Idempotency-Key header")
	errKeyRepeated = errors.New("more than one Idempotency-Key header")
	errKeyEmpty    = errors.New("the Idempotency-Key is empty")
	errKeyLong     = errors.New("the Idempotency-Key is longer than 255 bytes")
	errKeyChars    = errors.New("the Idempotency-Key holds a character outside printable ASCII")
	errKeyQuoted   = errors.New("the Idempotency-Key is a malformed quoted string")
)

// parseKey reads the Idempotency-Key of r, in the header name, which must
// be canonical (as net/http keys r.Header). The draft makes it a
// structured-field string ("abc"); many clients send it bare (abc), so both
// are accepted and mean the same key.
func parseKey(r *http.Request, name string) (string, error) {
	vals := r.Header[name] // name is canonical (headerNames): Values would canonicalize it again
	switch len(vals) {
	case 0:
		return "", errKeyMissing
	case 1:
	default:
		return "", errKeyRepeated
	}
	// Only RFC 9110's OWS, space and tab: strings.TrimSpace also strips
	// Unicode spaces (U+0085, U+00A0, U+3000), whose bytes the key forbids,
	// and would turn them into another request's valid key.
	raw := strings.Trim(vals[0], " \t")
	key := raw
	if strings.HasPrefix(raw, `"`) {
		var err error
		if key, err = unquote(raw); err != nil {
			return "", err
		}
	}
	if err := checkKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// checkKey refuses a key (unquoted) that is empty, too long, or holds a
// byte outside printable ASCII.
func checkKey(key string) error {
	switch {
	case key == "":
		return errKeyEmpty
	case len(key) > maxKeyLen:
		return errKeyLong
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return errKeyChars
		}
	}
	return nil
}

// unquote decodes an RFC 8941 sf-string: printable ASCII between quotes,
// with only \" and \\ escaped.
func unquote(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", errKeyQuoted
	}
	s = s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", errKeyQuoted
			}
			b.WriteByte(s[i])
		case c == '"':
			return "", errKeyQuoted
		case c < 0x20 || c > 0x7e:
			return "", errKeyChars
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// principal runs Options.Principal, if set.
func (m *Keys) principal(r *http.Request) (string, error) {
	if m.opt.Principal == nil {
		return "", nil
	}
	return m.opt.Principal(r)
}

// scope makes the lookup key: the key under principal, or under the
// client's address when there is none, so that no client can ever read
// another's stored response. Lengths are spelled out so that no scope/key
// pair can be made to collide with another, and the two forms differ after
// "idem:" (a digit, or "ip:"). Stored responses are found by these forms,
// so changing one loses them: their retries run the handler again.
func (m *Keys) scope(r *http.Request, principal, key string) string {
	if principal != "" {
		return principalKey(principal, key)
	}
	return addrKey(m.clientAddr(r), key)
}

// principalKey and addrKey are scope's two forms; Lookup and Forget make
// them too.
func principalKey(p, key string) string {
	return "idem:" + strconv.Itoa(len(p)) + ":" + p + ":" + key
}

func addrKey(a, key string) string {
	return "idem:ip:" + strconv.Itoa(len(a)) + ":" + a + ":" + key
}

// clientAddr is the scope of a request without a principal. A RemoteAddr
// rewritten from a forgeable header is still used, since the real peer is
// gone by then, but logged once: it lets a client pose as another.
func (m *Keys) clientAddr(r *http.Request) string {
	a, rewritten := clientip.Key(r, m.opt.TrustProxy)
	if rewritten {
		m.warnRewritten.Do(func() {
			logctx.Logger(r.Context(), m.opt.Logger).Warn("idem: "+clientip.RewrittenWarning, "remote_addr", r.RemoteAddr)
		})
	}
	return a
}
