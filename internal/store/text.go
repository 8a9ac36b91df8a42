package store

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// ErrInvalid: the request carries a value no store may hold (a NUL byte or
// invalid UTF-8 in a text field). Both stores refuse it with this error
// before writing, identically: Postgres's text type cannot hold a NUL and
// SQLite would store it, so leaving it to the database made one store
// fail a whole batch with a driver error and the other accept the row.
var ErrInvalid = errors.New("invalid")

// TextError names the field and what is wrong with it.
type TextError struct {
	Field  string
	Reason string
}

func (e *TextError) Error() string        { return e.Field + " " + e.Reason }
func (e *TextError) Is(target error) bool { return target == ErrInvalid }

// CheckText refuses a NUL byte or invalid UTF-8 in a text field.
func CheckText(field, s string) error {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return &TextError{Field: field, Reason: fmt.Sprintf("contains a NUL byte at byte %d", i)}
	}
	if !utf8.ValidString(s) {
		i := 0
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			i += n
		}
		return &TextError{Field: field, Reason: fmt.Sprintf("is not valid UTF-8 (at byte %d)", i)}
	}
	return nil
}

// CheckAttributes applies CheckText to every key and every string inside
// attribute values, in key order so the first error is always the same.
func CheckAttributes(attrs map[string]any) error {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := CheckText("attribute name", k); err != nil {
			return err
		}
		if err := checkValue("attribute "+fmt.Sprintf("%q", k), attrs[k]); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(field string, v any) error {
	switch v := v.(type) {
	case string:
		return CheckText(field, v)
	case map[string]any:
		for k, inner := range v {
			if err := CheckText(field+" key", k); err != nil {
				return err
			}
			if err := checkValue(field, inner); err != nil {
				return err
			}
		}
	case []any:
		for _, inner := range v {
			if err := checkValue(field, inner); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckContact checks every text field of c.
func CheckContact(c Contact) error {
	if err := CheckText("email", c.Email); err != nil {
		return err
	}
	if err := CheckText("name", c.Name); err != nil {
		return err
	}
	return CheckAttributes(c.Attributes)
}

// CheckContacts checks every contact of a batch, naming the first bad one.
func CheckContacts(cs []Contact) error {
	for i, c := range cs {
		if err := CheckContact(c); err != nil {
			return fmt.Errorf("contact %d (%s): %w", i, c.ID, err)
		}
	}
	return nil
}

// CheckFields checks name/value pairs: CheckFields("name", b.Name, "html", …).
func CheckFields(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := CheckText(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// CheckBroadcast checks a broadcast's text fields.
func CheckBroadcast(b Broadcast) error {
	c := b.Content
	return CheckFields("name", b.Name, "request id", b.RequestID, "from_name", c.FromName, "from_address", c.FromAddress,
		"subject", c.Subject, "html", c.HTML, "text", c.Text)
}

// CheckTemplate checks a stored template's text fields.
func CheckTemplate(t Template) error {
	return CheckFields("name", t.Name, "from_address", t.FromAddress, "from_name", t.FromName,
		"subject", t.Subject, "text", t.Text, "html", t.HTML)
}

// CheckRowText checks an import row's text fields as they arrive (string
// attributes), so one bad row is refused alone instead of failing the batch
// it would have been written with.
func CheckRowText(name string, attrs map[string]string, segments []string) error {
	if err := CheckText("name", name); err != nil {
		return err
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := CheckText("attribute name", k); err != nil {
			return err
		}
		if err := CheckText(fmt.Sprintf("attribute %q", k), attrs[k]); err != nil {
			return err
		}
	}
	for _, s := range segments {
		if err := CheckText("segment name", s); err != nil {
			return err
		}
	}
	return nil
}

// Plural is one when n is 1, otherwise many: for messages that count
// ("1 message", "3 messages").
func Plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
