package message

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/oklog/ulid/v2"
)

// One-click unsubscribe links (RFC 8058). Every broadcast message carries
//
//	List-Unsubscribe: <BASE/u/TOKEN>
//	List-Unsubscribe-Post: List-Unsubscribe=One-Click
//
// TOKEN names the broadcast and the contact and carries an HMAC over both, so
// the public endpoint can act on it without a lookup table and nobody can
// unsubscribe someone else by editing a link. Keys rotate: the first key
// signs, every key verifies, so links in mail already sent keep working
// while an old key is still listed.

// MinUnsubscribeKeyLen is the shortest signing key accepted, in bytes.
const MinUnsubscribeKeyLen = 32

const (
	tokenMACLen = 16 // 128 bits of HMAC-SHA256: unforgeable, and a short link
	tokenLen    = 16 + 16 + tokenMACLen
	// tokenDomain separates these MACs from any other use of the key.
	tokenDomain = "rangecast unsubscribe v1\x00"
)

// UnsubscribeTokenLen is the length of a token in its URL form.
var UnsubscribeTokenLen = base64.RawURLEncoding.EncodedLen(tokenLen)

func tokenMAC(key []byte, broadcast, contact ulid.ULID) []byte {
	m := hmac.New(sha256.New, key)
	writeTokenInput(m, broadcast, contact)
	return m.Sum(nil)[:tokenMACLen]
}

// writeTokenInput writes what a token's MAC covers to m.
func writeTokenInput(m hash.Hash, broadcast, contact ulid.ULID) {
	m.Write(tokenDomainBytes)
	m.Write(broadcast[:])
	m.Write(contact[:])
}

var tokenDomainBytes = []byte(tokenDomain)

// appendToken appends the token for contact's copy of broadcast, signed
// with m, a keyed HMAC-SHA256 in its initial state: the ids, then the MAC
// cut to its length, in base64url.
func appendToken(dst []byte, m hash.Hash, broadcast, contact ulid.ULID) []byte {
	var raw [16 + 16 + sha256.Size]byte
	copy(raw[:16], broadcast[:])
	copy(raw[16:32], contact[:])
	writeTokenInput(m, broadcast, contact)
	sum := m.Sum(raw[:32])
	return base64.RawURLEncoding.AppendEncode(dst, sum[:tokenLen])
}

// UnsubscribeToken is the token for contact's copy of broadcast, signed with
// key.
func UnsubscribeToken(key []byte, broadcast, contact ulid.ULID) string {
	return string(appendToken(nil, hmac.New(sha256.New, key), broadcast, contact))
}

// VerifyUnsubscribeToken returns the broadcast and contact a token names when
// one of keys signed it. Anything else (malformed, tampered, signed with a
// retired key) is simply not ok: callers answer every token the same way.
func VerifyUnsubscribeToken(keys [][]byte, token string) (broadcast, contact ulid.ULID, ok bool) {
	if len(token) != UnsubscribeTokenLen {
		return broadcast, contact, false
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(raw) != tokenLen {
		return broadcast, contact, false
	}
	copy(broadcast[:], raw[:16])
	copy(contact[:], raw[16:32])
	for _, k := range keys {
		if hmac.Equal(raw[32:], tokenMAC(k, broadcast, contact)) {
			return broadcast, contact, true
		}
	}
	return ulid.ULID{}, ulid.ULID{}, false
}

// UnsubscribePath is the path of the one-click endpoint under the public base
// URL; the token follows it.
const UnsubscribePath = "/u/"

// Unsubscribe makes the links of one sender: base is the public HTTP origin
// (https://mail.example.com, or with a path prefix), keys its signing keys.
// The first key signs unless the coordinators that verify the links do not
// all accept it (Accept): a key put first on the page workers before the
// coordinators have it would sign links nobody can verify.
type Unsubscribe struct {
	base string
	keys []*unsubscribeKey
	// signing is the index of the key that signs; noKey when no key is
	// accepted by every coordinator (Usable says so).
	signing atomic.Int32
}

const noKey = -1

type unsubscribeKey struct {
	key []byte
	id  string
	// macs holds keyed HMACs to Reset: keying one anew for every message
	// hashed the key's two pads each time, most of a link's cost.
	macs sync.Pool
}

// NewUnsubscribe checks base and keys (the first signs).
func NewUnsubscribe(base string, keys ...[]byte) (*Unsubscribe, error) {
	base = strings.TrimRight(base, "/")
	if err := validateUnsubscribeURL(base + UnsubscribePath + "x"); err != nil {
		return nil, fmt.Errorf("unsubscribe base URL: %w", err)
	}
	// The List-Unsubscribe line cannot be folded inside its URL: a base
	// that leaves no room for the token under the 998-character line limit
	// made every message fail to render, found only at send (tester).
	if n := len("List-Unsubscribe: <>") + len(base) + len(UnsubscribePath) + UnsubscribeTokenLen; n > hardLineLimit {
		return nil, fmt.Errorf("unsubscribe base URL is %d characters: with a link's token its List-Unsubscribe line would be %d, past the %d a mail header line may hold; use a shorter public URL", len(base), n, hardLineLimit)
	}
	if len(keys) == 0 {
		return nil, errors.New("no unsubscribe signing key")
	}
	u := &Unsubscribe{base: base}
	for _, key := range keys {
		if len(key) < MinUnsubscribeKeyLen {
			return nil, fmt.Errorf("unsubscribe signing key is %d bytes; use at least %d random bytes", len(key), MinUnsubscribeKeyLen)
		}
		u.keys = append(u.keys, &unsubscribeKey{key: key, id: UnsubscribeKeyID(key)})
	}
	return u, nil
}

// UnsubscribeKeyID names a key without revealing it: the first 8 bytes of
// its HMAC over a fixed text, in hex. Coordinators publish the ids of the
// keys they verify with, and page workers sign with one of theirs that
// every coordinator has.
func UnsubscribeKeyID(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("rangecast unsubscribe key id"))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// KeyIDs are the ids of u's keys, in order.
func (u *Unsubscribe) KeyIDs() []string {
	out := make([]string, len(u.keys))
	for i, k := range u.keys {
		out[i] = k.id
	}
	return out
}

// Accept makes the first key whose id accepted says every verifier has
// sign from now on, and reports which; with none, no key signs and
// Usable says so.
func (u *Unsubscribe) Accept(accepted func(id string) bool) (id string, ok bool) {
	for i, k := range u.keys {
		if accepted(k.id) {
			u.signing.Store(int32(i))
			return k.id, true
		}
	}
	u.signing.Store(noKey)
	return "", false
}

// ErrNoAcceptedKey: no key of the sender is one every coordinator verifies
// with, so any link it signed would unsubscribe nobody.
var ErrNoAcceptedKey = errors.New("no unsubscribe key of this page worker is one every coordinator verifies with, so its one-click and body links would unsubscribe nobody; give the coordinators the workers' key (RANGECAST_UNSUBSCRIBE_KEYS: the same list, in any order, on both), then resume")

// Usable is nil while a key signs, ErrNoAcceptedKey otherwise. A nil u
// (no links) is usable.
func (u *Unsubscribe) Usable() error {
	if u != nil && u.signing.Load() == noKey {
		return ErrNoAcceptedKey
	}
	return nil
}

// URL is the link for contact's copy of broadcast. A nil *Unsubscribe makes
// none ("", so Render writes no List-Unsubscribe). With no key accepted
// (Usable) it signs with the first, which callers check before.
func (u *Unsubscribe) URL(broadcast, contact ulid.ULID) string {
	if u == nil {
		return ""
	}
	k := u.keys[max(u.signing.Load(), 0)]
	m, ok := k.macs.Get().(hash.Hash)
	if ok {
		m.Reset()
	} else {
		m = hmac.New(sha256.New, k.key)
	}
	out := make([]byte, 0, len(u.base)+len(UnsubscribePath)+UnsubscribeTokenLen)
	out = append(out, u.base...)
	out = append(out, UnsubscribePath...)
	out = appendToken(out, m, broadcast, contact)
	k.macs.Put(m)
	return string(out)
}

// ParseUnsubscribeKeys reads a comma-separated key list (the first signs).
// Each key is used as its bytes and must be at least MinUnsubscribeKeyLen
// long.
func ParseUnsubscribeKeys(s string) ([][]byte, error) {
	var keys [][]byte
	for i, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if len(k) < MinUnsubscribeKeyLen {
			return nil, fmt.Errorf("unsubscribe key %d is %d characters; use at least %d random characters (e.g. openssl rand -hex 32)", i+1, len(k), MinUnsubscribeKeyLen)
		}
		if why := WeakSecret(k); why != "" {
			return nil, fmt.Errorf("unsubscribe key %d %s; use at least %d random characters (e.g. openssl rand -hex 32)", i+1, why, MinUnsubscribeKeyLen)
		}
		keys = append(keys, []byte(k))
	}
	if len(keys) == 0 {
		return nil, errors.New("no unsubscribe keys")
	}
	return keys, nil
}

// placeholderWords are what templates and examples put where a secret goes.
var placeholderWords = []string{"change-me", "changeme", "change_me", "replace-me", "replaceme", "placeholder", "example", "xxxxxx"}

// WeakSecret says why s cannot be a randomly generated secret ("" when it
// may be one): it is or contains a placeholder (deploy/k8s/base's
// CHANGE-ME), or has too few distinct characters to be random (a hex key
// of 32 random bytes has all 16 digits; "aaaa…" has one). A process that
// starts with such a key signs links anyone can forge.
func WeakSecret(s string) string {
	lower := strings.ToLower(s)
	for _, w := range placeholderWords {
		if strings.Contains(lower, w) {
			return fmt.Sprintf("looks like a placeholder (it contains %q)", w)
		}
	}
	distinct := map[rune]bool{}
	for _, r := range s {
		distinct[r] = true
	}
	if len(distinct) < 10 {
		return fmt.Sprintf("has only %d distinct characters, so it is not random", len(distinct))
	}
	return ""
}
