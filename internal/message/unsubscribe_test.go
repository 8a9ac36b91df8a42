package message

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/rangecast/rangecast/internal/store"
)

var (
	keyA = []byte("0123456789abcdef0123456789abcdef-key-a")
	keyB = []byte("fedcba9876543210fedcba9876543210-key-b")
)

func TestUnsubscribeTokenRoundTrip(t *testing.T) {
	t.Parallel()
	tok := UnsubscribeToken(keyA, testBroadcast, testContact)
	if len(tok) != UnsubscribeTokenLen {
		t.Fatalf("token %q is %d characters, want %d", tok, len(tok), UnsubscribeTokenLen)
	}
	b, c, ok := VerifyUnsubscribeToken([][]byte{keyA}, tok)
	if !ok || b != testBroadcast || c != testContact {
		t.Fatalf("Verify = %s %s %v, want %s %s true", b, c, ok, testBroadcast, testContact)
	}
	if UnsubscribeToken(keyA, testBroadcast, testContact) != tok {
		t.Error("token is not deterministic")
	}
}

// Rotation: the new key signs, the old one still verifies mail already
// sent; once the old key is dropped, its tokens stop working.
func TestUnsubscribeTokenRotation(t *testing.T) {
	t.Parallel()
	old := UnsubscribeToken(keyA, testBroadcast, testContact)
	rotated := [][]byte{keyB, keyA}
	if _, _, ok := VerifyUnsubscribeToken(rotated, old); !ok {
		t.Error("token signed with the old key refused while the old key is listed")
	}
	if _, _, ok := VerifyUnsubscribeToken(rotated, UnsubscribeToken(keyB, testBroadcast, testContact)); !ok {
		t.Error("token signed with the new key refused")
	}
	if _, _, ok := VerifyUnsubscribeToken([][]byte{keyB}, old); ok {
		t.Error("token of a retired key accepted")
	}
}

func TestUnsubscribeTokenTampered(t *testing.T) {
	t.Parallel()
	keys := [][]byte{keyA}
	tok := UnsubscribeToken(keyA, testBroadcast, testContact)
	// Someone else's contact id with this token's MAC.
	other := ulid.MustParse("01ARZ3NDEKTSV4RRFFQ69G5FAV")
	forged := UnsubscribeToken(keyA, testBroadcast, other)
	swapped := forged[:43] + tok[43:]
	bad := []string{
		"", "x", tok[:len(tok)-1], tok + "A", strings.ToUpper(tok), swapped,
		UnsubscribeToken([]byte("an entirely different key of enough length"), testBroadcast, testContact),
		tok[:len(tok)-2] + "==",
	}
	for i := range len(tok) {
		flip := []byte(tok)
		if flip[i] == 'A' {
			flip[i] = 'B'
		} else {
			flip[i] = 'A'
		}
		bad = append(bad, string(flip))
	}
	for _, b := range bad {
		if b == tok {
			continue
		}
		if _, _, ok := VerifyUnsubscribeToken(keys, b); ok {
			t.Errorf("tampered token %q accepted", b)
		}
	}
	if _, _, ok := VerifyUnsubscribeToken(nil, tok); ok {
		t.Error("token accepted with no keys")
	}
}

func TestUnsubscribeURLInMessage(t *testing.T) {
	t.Parallel()
	u, err := NewUnsubscribe("https://mail.example.com/", keyA)
	if err != nil {
		t.Fatal(err)
	}
	link := u.URL(testBroadcast, testContact)
	want := "https://mail.example.com/u/" + UnsubscribeToken(keyA, testBroadcast, testContact)
	if link != want {
		t.Fatalf("URL = %q, want %q", link, want)
	}
	c := mustCompile(t, baseTemplate())
	p := baseParams()
	p.UnsubscribeURL = link
	msg, _ := parts(t, mustRender(t, c, p).Bytes)
	if got := msg.Header.Get("List-Unsubscribe"); got != "<"+link+">" {
		t.Errorf("List-Unsubscribe = %q", got)
	}
	if got := msg.Header.Get("List-Unsubscribe-Post"); got != "List-Unsubscribe=One-Click" {
		t.Errorf("List-Unsubscribe-Post = %q", got)
	}
	for _, bad := range []struct {
		base string
		key  []byte
	}{
		{"mail.example.com", keyA}, {"ftp://x", keyA}, {"https://x/<", keyA}, {"https://mail.example.com", []byte("short")},
		// No room for a token in a List-Unsubscribe line (tester: every
		// message failed to render, found only at send).
		{"https://mail.example.com/" + strings.Repeat("p", 1200), keyA},
	} {
		if _, err := NewUnsubscribe(bad.base, bad.key); err == nil {
			t.Errorf("NewUnsubscribe(%q, %d-byte key) accepted", bad.base, len(bad.key))
		}
	}
	// A long base that leaves room for the token renders.
	long := "https://mail.example.com/" + strings.Repeat("p", 880)
	lu, err := NewUnsubscribe(long, keyA)
	if err != nil {
		t.Fatalf("NewUnsubscribe(%d characters) = %v", len(long), err)
	}
	p.UnsubscribeURL = lu.URL(ulid.Make(), ulid.Make())
	if _, err := c.Render(p); err != nil {
		t.Fatalf("rendering with the longest base accepted: %v", err)
	}
}

func TestParseUnsubscribeKeys(t *testing.T) {
	t.Parallel()
	keys, err := ParseUnsubscribeKeys(" " + string(keyB) + " , " + string(keyA) + ",")
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], keyB) || !bytes.Equal(keys[1], keyA) {
		t.Fatalf("ParseUnsubscribeKeys = %q, %v", keys, err)
	}
	for _, bad := range []string{"", " , ", "short", string(keyA) + ",short"} {
		if _, err := ParseUnsubscribeKeys(bad); err == nil {
			t.Errorf("ParseUnsubscribeKeys(%q) accepted", bad)
		}
	}
}

// The Message-ID a message carries is the one the store parses back out of a
// delivery event.
func TestMessageIDParsesBack(t *testing.T) {
	t.Parallel()
	mid := MessageID(testBroadcast, testContact, "Mail.Example.com")
	for _, form := range []string{mid, "<" + mid + ">", " <" + mid + "> "} {
		b, c, ok := store.ParseMessageID(form)
		if !ok || b != testBroadcast || c != testContact {
			t.Errorf("ParseMessageID(%q) = %s %s %v", form, b, c, ok)
		}
	}
	for _, bad := range []string{"", "x@y", "a.b@c", testBroadcast.String() + "@x", testBroadcast.String() + "." + testContact.String()} {
		if _, _, ok := store.ParseMessageID(bad); ok {
			t.Errorf("ParseMessageID(%q) ok", bad)
		}
	}
}

// FuzzVerifyUnsubscribeToken: no input panics, and any token that verifies
// is exactly the token the key makes for the ids it names (no second
// encoding of the same ids is accepted).
func FuzzVerifyUnsubscribeToken(f *testing.F) {
	keys := [][]byte{keyA, keyB}
	f.Add(UnsubscribeToken(keyA, testBroadcast, testContact))
	f.Add(UnsubscribeToken(keyB, testContact, testBroadcast))
	f.Add("")
	f.Add(strings.Repeat("A", UnsubscribeTokenLen))
	f.Add(strings.Repeat("_", UnsubscribeTokenLen))
	f.Fuzz(func(t *testing.T, tok string) {
		b, c, ok := VerifyUnsubscribeToken(keys, tok)
		if !ok {
			if b != (ulid.ULID{}) || c != (ulid.ULID{}) {
				t.Fatalf("refused token %q returned ids %s %s", tok, b, c)
			}
			return
		}
		if tok != UnsubscribeToken(keyA, b, c) && tok != UnsubscribeToken(keyB, b, c) {
			t.Fatalf("token %q verified but is not the canonical token for %s %s", tok, b, c)
		}
	})
}

func TestUnsubscribeLinkInTemplates(t *testing.T) {
	t.Parallel()
	link := `<a href="{{.UnsubscribeURL}}">Unsubscribe</a>`
	for _, tc := range []struct {
		name       string
		html, text string
		want       string // "" accepted; else the field refused
	}{
		{"none", `<p>Hi</p>`, "", "html"},
		{"html link, derived text", `<p>Hi</p>` + link, "", ""},
		{"link as text", `<p>Unsubscribe: {{.UnsubscribeURL}}</p>`, "", ""},
		{"in a comment only", `<p>Hi</p><!-- {{.UnsubscribeURL}} -->`, "", "html"},
		{"in a style only", `<style>/* {{.UnsubscribeURL}} */</style><p>Hi</p>`, "", "html"},
		{"html and own text", `<p>Hi</p>` + link, "Hi\nUnsubscribe: {{.UnsubscribeURL}}\n", ""},
		{"own text lacks it", `<p>Hi</p>` + link, "Hi\n", "text"},
		{"text only has it", `<p>Hi</p>`, "Unsubscribe: {{.UnsubscribeURL}}", "html"},
		// Hidden by an inline style or the hidden attribute: a reader
		// cannot see it, so it is refused, saying it is hidden.
		{"display:none", `<p>Hi</p><div style="color:#999; display: none">` + link + `</div>`, "", "html hidden"},
		{"display:none on the link", `<p>Hi</p><A STYLE='DISPLAY:NONE' href="{{.UnsubscribeURL}}">Unsubscribe</A>`, "", "html hidden"},
		{"nested in a hidden div", `<div style="display:none"><div><p>x</p></div><div>` + link + `</div></div><p>Bye</p>`, "", "html hidden"},
		{"hidden attribute", `<p>Hi</p><span hidden>` + link + `</span>`, "", "html hidden"},
		{"opacity 0", `<p>Hi</p><p style="opacity:0">` + link + `</p>`, "", "html hidden"},
		{"preheader idiom", `<div style="max-height:0;overflow:hidden">` + link + `</div><p>Hi</p>`, "", "html hidden"},
		{"never closed", `<p>Hi</p><div style="display:none"><p>x` + link, "", "html hidden"},
		{"in a template element", `<p>Hi</p><template>` + link + `</template>`, "", "html hidden"},
		{"after a head with a style", `<html><head><title>x</title><style>p{}</style></head><body><p>Hi</p>` + link + `</body></html>`, "", ""},
		{"empty link", `<p>Hi</p><a href="{{.UnsubscribeURL}}"></a>`, "", "html hidden"},
		{"link of white space", `<p>Hi</p><a href="{{.UnsubscribeURL}}"> &nbsp; <span> </span></a>`, "", "html hidden"},
		// Visible: hidden siblings, small but real sizes, other styles.
		{"image link", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><img src="x.png" alt=""></a>`, "", ""},
		{"link text in a span", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><span>Unsubscribe</span></a>`, "", ""},
		{"hidden preheader before a visible link", `<div style="display:none">Preview text</div><p>Hi</p>` + link, "", ""},
		{"hidden block closed before the link", `<div style="display:none"><div>a</div></div><div>` + link + `</div>`, "", ""},
		{"font-size 0.8em", `<p style="font-size:0.8em;color:#999">` + link + `</p>`, "", ""},
		{"opacity 0.6", `<p style="opacity:0.6">` + link + `</p>`, "", ""},
		{"display:block", `<p style="display:block">` + link + `</p>`, "", ""},
		{"hidden void element", `<p>Hi<img hidden src="x.png">` + link + `</p>`, "", ""},
		{"a data attribute named like hidden", `<p data-hidden="1" class="hidden">` + link + `</p>`, "", ""},
		// Real-world HTML that shows its link (found by review): MJML sets
		// font-size:0 on columns and the size again inside; hidden as a
		// word in a value; a <p> a browser closes at the next <p>; an MSO
		// conditional comment; a child visible again; an SVG link.
		{"MJML column", `<td style="font-size:0px;padding:10px 25px;word-break:break-word;"><div style="font-family:Arial;font-size:13px;line-height:1;">` + link + `</div></td>`, "", ""},
		{"hidden in a class and a title", `<p class="footer hidden-xs hidden lg-visible" title="nothing hidden here">` + link + `</p>`, "", ""},
		{"unclosed hidden p", `<p style="display:none">preview<p>Hi ` + link, "", ""},
		// Every client but Outlook closes the hidden block at its </div>;
		// Outlook, reading the conditional comment, takes that for the
		// inner div's, and the link is inside the hidden block to it.
		{"MSO comment in a hidden block", `<div style="display:none"><!--[if mso]><div><![endif]-->x</div><p>` + link + `</p>`, "", "html outlook"},
		{"MSO comment in a hidden block, balanced", `<div style="display:none"><!--[if mso]><div></div><![endif]-->x</div><p>` + link + `</p>`, "", ""},
		// Outlook's conditional comments reach the message (conditional.go):
		// what only Outlook shows is a comment to every other client.
		{"a VML button for Outlook only", `<p>Hi</p><!--[if mso]><v:roundrect href="{{.UnsubscribeURL}}"><center>Unsubscribe</center></v:roundrect><![endif]-->`, "", "html"},
		// Outlook's own link is an <a> with something to click: a VML
		// shape or an <area> is not judged for size or text (verifier: a
		// 0x0 v:roundrect and a 0,0,0,0 area passed).
		{"a VML button, and a link for the others", `<p>Hi</p><!--[if mso]><v:roundrect href="{{.UnsubscribeURL}}"><center>Unsubscribe</center></v:roundrect><![endif]--><!--[if !mso]><!-->` + link + `<!--<![endif]-->`, "", "html outlook"},
		{"a 0x0 VML shape for Outlook", `<p>Hi</p><!--[if !mso]><!-->` + link + `<!--<![endif]--><!--[if mso]><v:roundrect href="{{.UnsubscribeURL}}" style="height:0px;width:0px"></v:roundrect><![endif]-->`, "", "html outlook"},
		{"an empty area for Outlook", `<p>Hi</p><!--[if !mso]><!-->` + link + `<!--<![endif]--><!--[if mso]><img src="x.png" usemap="#m" width="200" height="40"><map name="m"><area href="{{.UnsubscribeURL}}" shape="rect" coords="0,0,0,0" alt=""></map><![endif]-->`, "", "html outlook"},
		{"a VML button and a link for Outlook", `<p>Hi</p><!--[if mso]><v:roundrect href="{{.UnsubscribeURL}}"><center>Unsubscribe</center></v:roundrect>` + link + `<![endif]--><!--[if !mso]><!-->` + link + `<!--<![endif]-->`, "", ""},
		// A conditional comment left open is refused at Compile
		// (TestOutlookConditionalCommentsOutOfPlace, "never closed").
		{"a link for every client but Outlook", `<p>Hi</p><!--[if !mso]><!-->` + link + `<!--<![endif]-->`, "", "html outlook"},
		{"a link for every client but Outlook and IE", `<p>Hi</p><!--[if !mso | IE]><!-- -->` + link + `<!--<![endif]-->`, "", "html outlook"},
		{"a link for the others, and one for Outlook", `<p>Hi</p><!--[if !mso]><!-->` + link + `<!--<![endif]--><!--[if mso]>` + link + `<![endif]-->`, "", ""},
		{"MJML's ghost table around the link", `<!--[if mso | IE]><table role="presentation" width="600"><tr><td><![endif]--><div>` + link + `</div><!--[if mso | IE]></td></tr></table><![endif]-->`, "", ""},
		{"a link Outlook skips, by a condition not known to hold", `<p>Hi</p><!--[if gte mso 99]><!-->` + link + `<!--<![endif]-->`, "", "html outlook"},
		{"a link Outlook skips, by !(mso)", `<p>Hi</p><!--[if !(mso)]><!-->` + link + `<!--<![endif]-->`, "", "html outlook"},
		{"a link for the others, and a <link> for Outlook", `<p>Hi</p><!--[if !mso]><!-->` + link + `<!--<![endif]--><!--[if mso]><link rel="x" href="{{.UnsubscribeURL}}"><![endif]-->`, "", "html outlook"},
		{"a link for the others, and an empty one for Outlook", `<p>Hi</p><!--[if !mso]><!-->` + link + `<!--<![endif]--><!--[if mso]><a href="{{.UnsubscribeURL}}"></a><![endif]-->`, "", "html outlook"},
		{"a link for the others, and one for Outlook 2007 and later", `<p>Hi</p><!--[if !mso]><!-->` + link + `<!--<![endif]--><!--[if gte mso 12]>` + link + `<![endif]-->`, "", ""},
		{"an Outlook-only link changed", `<p>Hi</p>` + link + `<!--[if mso]><a href="{{.UnsubscribeURL}}/x">Unsubscribe</a><![endif]-->`, "", "html changed"},
		{"visibility hidden, child visible", `<div style="visibility:hidden"><p style="visibility:visible">` + link + `</p></div>`, "", ""},
		{"SVG link", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><svg width="10" height="10"></svg></a>`, "", ""},
		{"hidden td before the link's td", `<table><tr><td style="display:none">x<td>` + link + `</td></tr></table>`, "", ""},
		{"overflow hidden with a height", `<div style="height:40px;overflow:hidden">` + link + `</div>`, "", ""},
		// A link that is not the unsubscribe link as it is: something run
		// on after it makes a link that does not work (tester: sent).
		{"suffix after the link", `<p>Hi</p><a href="{{.UnsubscribeURL}}XX">Unsubscribe</a>`, "", "html changed"},
		{"suffix by printf", `<p>Hi</p><a href="{{printf "%sXX" .UnsubscribeURL}}">Unsubscribe</a>`, "", "html changed"},
		{"suffix as an entity", `<p>Hi</p><a href="{{.UnsubscribeURL}}&#88;">Unsubscribe</a>`, "", "html changed"},
		{"path after the link", `<p>Hi</p><a href="{{.UnsubscribeURL}}/../../x">Unsubscribe</a>`, "", "html changed"},
		{"slash after the link", `<p>Hi</p><a href="{{.UnsubscribeURL}}/">Unsubscribe</a>`, "", "html changed"},
		{"run on as text", `<p>Unsubscribe: {{.UnsubscribeURL}}XX</p>`, "", "html"},
		{"prefix before the link", `<p>Hi</p><a href="x{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html changed"},
		{"another site before the link", `<p>Hi</p><a href="https://evil.example/{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html changed"},
		{"prefix as an entity", `<p>Hi</p><a href="&#120;{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html changed"},
		{"hidden right link, visible prefixed one", `<p>Hi</p><div style="display:none">` + link + `</div><a href="/{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html changed"},
		{"prefix in the own text", `<p>Hi</p>` + link, "Unsubscribe: x{{.UnsubscribeURL}}\n", "text"},
		{"a colon right before the text link", `<p>Unsubscribe:{{.UnsubscribeURL}}</p>`, "", ""},
		{"run on in the own text", `<p>Hi</p>` + link, "Unsubscribe: {{.UnsubscribeURL}}/x\n", "text"},
		{"query string after the link", `<p>Hi</p><a href="{{.UnsubscribeURL}}?utm_source=news">Unsubscribe</a>`, "", ""},
		{"fragment after the link", `<p>Hi</p><a href=" {{.UnsubscribeURL}}#top ">Unsubscribe</a>`, "", ""},
		{"text link ending a sentence", `<p>To unsubscribe, open {{.UnsubscribeURL}}.</p>`, "", ""},
		{"text link in parentheses", `<p>Unsubscribe ({{.UnsubscribeURL}}), any time</p>`, "", ""},
		// Hidden other ways (tester: all were sent).
		{"font-size 0 on the link", `<p>Hi</p><a style="font-size:0" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"font-size 0 on the parent", `<p>Hi</p><div style="line-height:0;font-size:0px">` + link + `</div>`, "", "html hidden"},
		{"1px dot", `<p>Hi</p><a style="font-size:1px" href="{{.UnsubscribeURL}}">.</a>`, "", "html hidden"},
		{"a lone dot to click", `<p>Hi</p><a href="{{.UnsubscribeURL}}">.</a>`, "", "html hidden"},
		{"visibility hidden", `<p>Hi</p><span style="visibility:hidden">` + link + `</span>`, "", "html hidden"},
		{"transparent text", `<p>Hi</p><a style="color:transparent" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"white on white", `<p>Hi</p><a style="color:#fff;background:#FFFFFF" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"text-indent far off", `<p>Hi</p><p style="text-indent:-9999px">` + link + `</p>`, "", "html hidden"},
		{"scaled to nothing", `<p>Hi</p><p style="transform:scale(0)">` + link + `</p>`, "", "html hidden"},
		{"positioned off the page", `<p>Hi</p><p style="position:absolute;left:-9999px">` + link + `</p>`, "", "html hidden"},
		{"closed details", `<p>Hi</p><details><summary>More</summary>` + link + `</details>`, "", "html hidden"},
		{"inert in a textarea", `<p>Hi</p><textarea>{{.UnsubscribeURL}}</textarea>`, "", "html hidden"},
		// Hidden inside the link, or nearly invisible (verifier).
		{"link text hidden by a child", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><span style="font-size:0">Unsubscribe</span></a>`, "", "html hidden"},
		{"link text invisible in a child", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><span style="visibility:hidden">Unsubscribe</span></a>`, "", "html hidden"},
		{"nearly transparent", `<p>Hi</p><p style="opacity:0.01">` + link + `</p>`, "", "html hidden"},
		{"scaled nearly to nothing", `<p>Hi</p><p style="transform:scale(0.01)">` + link + `</p>`, "", "html hidden"},
		{"zoom 0", `<p>Hi</p><p style="zoom:0">` + link + `</p>`, "", "html hidden"},
		{"filter opacity 0", `<p>Hi</p><p style="filter:opacity(0)">` + link + `</p>`, "", "html hidden"},
		{"clip-path inset 50%", `<p>Hi</p><p style="clip-path:inset(50%)">` + link + `</p>`, "", "html hidden"},
		{"a 1x1 image to click", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><img src="x.gif" width="1" height="1" alt=""></a>`, "", "html hidden"},
		{"in a select", `<p>Hi</p><select><option>{{.UnsubscribeURL}}</option></select>`, "", "html hidden"},
		// A second verifier's round: parsing as a browser does.
		{"data-href to the link, href elsewhere", `<p>Hi</p><a data-href="{{.UnsubscribeURL}}" href="https://evil.example/">Unsubscribe</a>`, "", "html"},
		{"the URL as the text of a link elsewhere", `<p>Hi</p><a href="https://evil.example/">{{.UnsubscribeURL}}</a>`, "", "html changed"},
		{"a /> that does not close a div", `<p>Hi</p><div style="display:none"/>` + link + `<p>x</p>`, "", "html hidden"},
		{"hidden cell holding a table", `<table><tr><td style="display:none"><table><tr><td>x</td></tr></table>` + link + `</td><td>y</td></tr></table>`, "", "html hidden"},
		{"hidden item holding a list", `<ul><li style="display:none">x<ul><li>y</li></ul>` + link + `</li></ul>`, "", "html hidden"},
		{"custom element", `<p>Hi</p><x-y style="display:none">` + link + `</x-y>`, "", "html hidden"},
		{"comment inside a declaration", `<p>Hi</p><div style="display:/**/none">` + link + `</div>`, "", "html hidden"},
		{"escape inside a property", `<p>Hi</p><div style="d\isplay:none">` + link + `</div>`, "", "html hidden"},
		{"important beats a later one", `<p>Hi</p><div style="display:none ! important;display:block">` + link + `</div>`, "", "html hidden"},
		{"font shorthand to 0", `<p>Hi</p><a style="font:0/0 a" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"nearly transparent color", `<p>Hi</p><a style="color:rgba(0,0,0,0.05)" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"eight-digit hex transparent", `<p>Hi</p><a style="color:#ffffff00" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"text fill transparent", `<p>Hi</p><a style="-webkit-text-fill-color:transparent" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"near white on white", `<p>Hi</p><a style="color:rgb(254,254,254);background:#fff" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"hidden image as the only content", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><img hidden src="x.png"></a>`, "", "html hidden"},
		{"image with no source", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><img alt=""></a>`, "", "html hidden"},
		{"zero-size svg", `<p>Hi</p><a href="{{.UnsubscribeURL}}"><svg width="0" height="0"></svg></a>`, "", "html hidden"},
		{"closed dialog", `<p>Hi</p><dialog>` + link + `</dialog>`, "", "html hidden"},
		{"a filler letter to click", `<p>Hi</p><a href="{{.UnsubscribeURL}}">&#x3164;</a>`, "", "html hidden"},
		{"video fallback", `<p>Hi</p><video src="a.mp4">` + link + `</video>`, "", "html hidden"},
		{"scale 0.001", `<p>Hi</p><div style="transform:scale(0.001)">` + link + `</div>`, "", "html hidden"},
		{"scale3d to nothing", `<p>Hi</p><div style="transform:scale3d(0,0,0)">` + link + `</div>`, "", "html hidden"},
		{"translated away", `<p>Hi</p><div style="transform:translateX(-9999px)">` + link + `</div>`, "", "html hidden"},
		{"relative far left", `<p>Hi</p><div style="position:relative;left:-9999px">` + link + `</div>`, "", "html hidden"},
		{"absolute far right", `<p>Hi</p><div style="position:absolute;right:9999px">` + link + `</div>`, "", "html hidden"},
		{"margin shorthand far off", `<p>Hi</p><div style="margin:0 0 0 -9999px">` + link + `</div>`, "", "html hidden"},
		{"indent in vw", `<p>Hi</p><div style="text-indent:-100vw">` + link + `</div>`, "", "html hidden"},
		{"overflow clip, no height", `<p>Hi</p><div style="height:0;overflow:clip">` + link + `</div>`, "", "html hidden"},
		{"1px high box", `<p>Hi</p><div style="height:1px;overflow:hidden">` + link + `</div>`, "", "html hidden"},
		{"content-visibility hidden", `<p>Hi</p><div style="content-visibility:hidden">` + link + `</div>`, "", "html hidden"},
		{"clip-path left inset 100%", `<p>Hi</p><div style="clip-path:inset(0 0 0 100%)">` + link + `</div>`, "", "html hidden"},
		{"clip-path circle 0", `<p>Hi</p><div style="clip-path:circle(0)">` + link + `</div>`, "", "html hidden"},
		{"screen-reader clip", `<p>Hi</p><div style="position:absolute;clip:rect(1px,1px,1px,1px)">` + link + `</div>`, "", "html hidden"},
		{"opacity 1e-9", `<p>Hi</p><div style="opacity:1e-9">` + link + `</div>`, "", "html hidden"},
		{"zoom 1%", `<p>Hi</p><div style="zoom:1%">` + link + `</div>`, "", "html hidden"},
		{"letters on top of each other", `<p>Hi</p><a style="letter-spacing:-1em" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"no pointer to click", `<p>Hi</p><a style="pointer-events:none" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", "html hidden"},
		{"hidden in Outlook", `<p>Hi</p><div style="mso-hide:all">` + link + `</div>`, "", "html hidden"},
		// ... and not refusing what a browser shows (verifier).
		{"open preheader p closed by a table", `<p style="display:none">Preheader<table><tr><td>` + link + `</td></tr></table>`, "", ""},
		{"white cell, link in its own color", `<td style="color:#ffffff;background-color:#ffffff">&nbsp;` + link + `</td>`, "", ""},
		{"colors inherited", `<p>Hi</p><a style="color:inherit;background:inherit" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", ""},
		{"height on an inline link", `<p>Hi</p><a style="height:0;overflow:hidden" href="{{.UnsubscribeURL}}">Unsubscribe</a>`, "", ""},
		{"partial clip-path", `<p>Hi</p><div style="clip-path:inset(0 0 0 20%)">` + link + `</div>`, "", ""},
		{"small translate", `<p>Hi</p><div style="transform:translateY(-2px)">` + link + `</div>`, "", ""},
		// Still visible: styles that only look like those.
		{"open details", `<p>Hi</p><details open><summary>More</summary>` + link + `</details>`, "", ""},
		{"grey on white", `<p style="color:#999;background:#fff">` + link + `</p>`, "", ""},
		{"small print", `<p style="font-size:10px">` + link + `</p>`, "", ""},
		{"hanging indent", `<p style="text-indent:-1em;padding-left:1em">` + link + `</p>`, "", ""},
		{"font-size 0 with a link sized again", `<div style="font-size:0"><a style="font-size:12px" href="{{.UnsubscribeURL}}">Unsubscribe</a></div>`, "", ""},
		{"colored block with its own link color", `<td style="color:#fff;background-color:#fff"><a style="color:#333" href="{{.UnsubscribeURL}}">Unsubscribe</a></td>`, "", ""},
		{"link text in another script", `<p>Hi</p><a href="{{.UnsubscribeURL}}">退订</a>`, "", ""},
		{"Japanese text after the link", `<p>配信停止は{{.UnsubscribeURL}}よりお手続きください。</p>`, "", ""},
		{"Japanese own text after the link", `<p>Hi</p>` + link, "配信停止は{{.UnsubscribeURL}}よりお手続きください。\n", ""},
		{"hybrid layout: font-size 0 cell, columns sized by class", `<style>.col{font-size:14px}</style><table><tr><td style="font-size:0"><div class="col">` + link + `</div></td></tr></table>`, "", ""},
		{"font-size 0 cell, a font tag sized inside", `<td style="font-size:0"><font size="2">` + link + `</font></td>`, "", ""},
		{"screen-reader-only clip", `<p>Hi</p><span style="position:absolute;clip:rect(0 0 0 0)">` + link + `</span>`, "", "html hidden"},
		{"margin far off", `<p>Hi</p><p style="margin-left:-9999px">` + link + `</p>`, "", "html hidden"},
		{"scaled flat", `<p>Hi</p><p style="transform:scale(1, 0)">` + link + `</p>`, "", "html hidden"},
		{"scaled to half", `<p style="transform:scale(0.5)">` + link + `</p>`, "", ""},
		{"mirrored for right-to-left text", `<p style="transform:scaleX(-1)">` + link + `</p>`, "", ""},
		{"mirrored by a matrix", `<p style="transform:matrix(-1, 0, 0, 1, 0, 0)">` + link + `</p>`, "", ""},
		{"rotated a quarter by a matrix", `<p style="transform:matrix(0,1,-1,0,0,0)">` + link + `</p>`, "", ""},
		{"rotated a quarter by a 3-D matrix", `<p style="transform:matrix3d(0,1,0,0,-1,0,0,0,0,0,1,0,0,0,0,1)">` + link + `</p>`, "", ""},
		{"mirrored and scaled nearly to nothing", `<p>Hi</p><p style="transform:scale(-0.01)">` + link + `</p>`, "", "html hidden"},
		{"a matrix that flattens", `<p>Hi</p><p style="transform:matrix(1,2,2,4,0,0)">` + link + `</p>`, "", "html hidden"},
		{"a matrix that squashes one way", `<p>Hi</p><p style="transform:matrix(1,0,0,0.02,0,0)">` + link + `</p>`, "", "html hidden"},
		{"a matrix that stretches one way and squashes the other", `<p>Hi</p><p style="transform:matrix(100,0,0,0.0001,0,0)">` + link + `</p>`, "", "html hidden"},
		{"a matrix that moves far off", `<p>Hi</p><p style="transform:matrix(1,0,0,1,-9999,0)">` + link + `</p>`, "", "html hidden"},
		{"a matrix that scales to half", `<p style="transform:matrix(0.5,0,0,0.5,0,0)">` + link + `</p>`, "", ""},
		{"a zero matrix", `<p>Hi</p><p style="transform:matrix(0,0,0,0,0,0)">` + link + `</p>`, "", "html hidden"},
		{"a 3-D matrix scaled to nothing", `<p>Hi</p><p style="transform:matrix3d(0,0,0,0,0,0.001,0,0,0,0,1,0,0,0,0,1)">` + link + `</p>`, "", "html hidden"},
		{"font-size 0 cell, the link sized by the font shorthand", `<td style="font-size:0"><a style="font:normal 12px/18px Arial" href="{{.UnsubscribeURL}}">Unsubscribe</a></td>`, "", ""},
		{"image button with font-size 0", `<p>Hi</p><a style="font-size:0;line-height:0" href="{{.UnsubscribeURL}}"><img alt="Unsubscribe" src="b.png" width="120" height="30"></a>`, "", ""},
		{"faded but readable", `<p style="opacity:0.5">` + link + `</p>`, "", ""},
		{"run on in the own text, said so", `<p>Hi</p>` + link, "Unsubscribe: {{.UnsubscribeURL}}XX\n", "text"},
		// A link in a branch the sample contact takes and others do not
		// (tester: accepted, and a contact imported with no name got none).
		{"only for contacts with a name", `{{if .Name}}<p>Hi {{.Name}}</p><p>` + link + `</p>{{else}}<p>Hi there</p>{{end}}`, "", "html some"},
		{"only for the sample address", `<p>Hi</p>{{if eq .Email "sample@example.com"}}` + link + `{{end}}`, "", "html some"},
		{"only for the sample name", `<p>Hi</p>{{if eq .Name "Sample"}}` + link + `{{end}}`, "", "html some"},
		{"with a name, in either branch", `{{if .Name}}<p>Hi {{.Name}}</p>{{else}}<p>Hi</p>{{end}}` + link, "", ""},
	} {
		tmpl := baseTemplate()
		tmpl.HTML, tmpl.Text = tc.html, tc.text
		c := mustCompile(t, tmpl)
		err := c.CheckUnsubscribeLink()
		var ve *ValidationError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (!errors.As(err, &ve) || ve.Field != strings.Fields(tc.want)[0]):
			t.Errorf("%s: err = %v, want a ValidationError on %s", tc.name, err, tc.want)
		case strings.HasSuffix(tc.want, " changed"):
			if !strings.Contains(err.Error(), "with something added before or after it") {
				t.Errorf("%s: %v does not say the link was changed", tc.name, err)
			}
		case strings.HasSuffix(tc.want, " some"):
			if ve.Field != "html" || !strings.Contains(err.Error(), "to some contacts only") {
				t.Errorf("%s: %v does not say only some contacts see the link", tc.name, err)
			}
		case strings.HasSuffix(tc.want, " outlook"):
			if !strings.Contains(err.Error(), "every client but Outlook for Windows") {
				t.Errorf("%s: %v does not say Outlook does not show the link", tc.name, err)
			}
		case strings.HasSuffix(tc.want, " hidden"):
			if !strings.Contains(err.Error(), "hides its unsubscribe link") {
				t.Errorf("%s: %v does not say the link is hidden", tc.name, err)
			}
		case tc.want != "" && !strings.Contains(err.Error(), "{{.UnsubscribeURL}}") || tc.want != "" && !strings.Contains(err.Error(), "--no-unsubscribe-link"):
			t.Errorf("%s: %v does not say how to add a link", tc.name, err)
		}
	}

	// The rendered link is the List-Unsubscribe URL, in both parts.
	tmpl := baseTemplate()
	tmpl.HTML += link
	tmpl.Text += "Unsubscribe: {{.UnsubscribeURL}}\n"
	p := baseParams()
	p.UnsubscribeURL = "https://mail.example.com/u/TOKEN-a_b"
	m := mustRender(t, mustCompile(t, tmpl), p)
	msg, bodies := parts(t, m.Bytes)
	if got := msg.Header.Get("List-Unsubscribe"); got != "<"+p.UnsubscribeURL+">" {
		t.Fatalf("List-Unsubscribe = %q", got)
	}
	if !strings.Contains(bodies["text/html"], `href="`+p.UnsubscribeURL+`"`) || !strings.Contains(bodies["text/plain"], p.UnsubscribeURL) {
		t.Errorf("bodies lack the header's link:\n%v", bodies)
	}
}

// The placeholders of deploy/k8s and keys that are not random are refused
// at start, however long they are.
func TestPlaceholderKeysRefused(t *testing.T) {
	t.Parallel()
	for _, k := range []string{
		"CHANGE-ME-CHANGE-ME-CHANGE-ME-CHANGE-ME",           // deploy/k8s/base/secret.yaml
		"CHANGE-ME-openssl-rand-hex-32-CHANGE-ME-CHANGE-ME", // overlays/production
		strings.Repeat("a", 64),
		strings.Repeat("0123", 10),
		"replace-me-with-a-real-key-of-32-chars-at-least",
	} {
		if _, err := ParseUnsubscribeKeys(k); err == nil {
			t.Errorf("ParseUnsubscribeKeys(%q) accepted", k)
		}
	}
	for _, k := range []string{"dev-only-unsubscribe-key-not-secret-0123456789", "3f9a1c0e7b2d4a6f8e1c3b5d7f9a0c2e4b6d8f0a1c3e5b7d9f1a3c5e7b9d1f3a"} {
		if _, err := ParseUnsubscribeKeys(k); err != nil {
			t.Errorf("ParseUnsubscribeKeys(%q): %v", k, err)
		}
	}
}

// TestUnsubscribeURLIsTheToken: the pooled MACs of URL make the links
// UnsubscribeToken makes, for one Unsubscribe used again and again and from
// many goroutines.
func TestUnsubscribeURLIsTheToken(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", MinUnsubscribeKeyLen))
	u, err := NewUnsubscribe("https://mail.example.com/", key)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				b := ulid.MustNew(uint64(g), strings.NewReader(strings.Repeat(string(rune('a'+g)), 16)))
				c := ulid.MustNew(uint64(i), strings.NewReader(strings.Repeat(string(rune('A'+i%26)), 16)))
				want := "https://mail.example.com" + UnsubscribePath + UnsubscribeToken(key, b, c)
				if got := u.URL(b, c); got != want {
					t.Errorf("URL = %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A broadcast relying on its body's link is never rendered for a contact
// whose branch of the template leaves the link out: that contact's
// ValidationError (the worker records it failed, preflight refuses the
// start). A branch on an attribute passes Compile, whose samples all take
// the branch with the link.
func TestRenderRefusesAMessageWithoutItsLink(t *testing.T) {
	t.Parallel()
	tmpl := baseTemplate()
	tmpl.Text = ""
	tmpl.HTML = `<p>Hi</p>{{if .Attributes.plan}}<a href="{{.UnsubscribeURL}}">Unsubscribe</a>{{end}}`
	c := mustCompile(t, tmpl)
	if err := c.CheckUnsubscribeLink(); err != nil {
		t.Fatalf("CheckUnsubscribeLink: %v; want it accepted (the samples take the branch)", err)
	}
	key := bytes.Repeat([]byte{7}, MinUnsubscribeKeyLen)
	u, err := NewUnsubscribe("https://example.com/?a=1&b=2", key) // a base HTML escapes
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		plan    string
		require bool
		refused bool
	}{
		{"pro", true, false},
		{"", true, true},
		{"", false, false}, // --no-unsubscribe-link: the body's link is the sender's business
	} {
		p := baseParams()
		p.Contact.Attributes = map[string]any{"plan": tc.plan}
		p.UnsubscribeURL = u.URL(p.BroadcastID, p.Contact.ID)
		p.RequireUnsubscribeLink = tc.require
		_, err := c.Render(p)
		var ve *ValidationError
		switch {
		case tc.refused && (!errors.As(err, &ve) || ve.Field != "html" || !strings.Contains(err.Error(), "no unsubscribe link for this contact")):
			t.Errorf("plan %q, required %v: err %v; want the html's ValidationError", tc.plan, tc.require, err)
		case !tc.refused && err != nil:
			t.Errorf("plan %q, required %v: %v", tc.plan, tc.require, err)
		}
	}
	// Content from before the link was required (no link for the sample)
	// is left as it was.
	tmpl.HTML = `<p>Hi</p>`
	c = mustCompile(t, tmpl)
	p := baseParams()
	p.UnsubscribeURL, p.RequireUnsubscribeLink = u.URL(p.BroadcastID, p.Contact.ID), true
	if _, err := c.Render(p); err != nil {
		t.Errorf("content without a link (made before the rule): %v", err)
	}
	// Content accepted before a stricter visibility rule (its link now
	// counts as hidden) still has each message held to carrying it.
	tmpl.HTML = `<p>Hi</p>{{if .Attributes.plan}}<a style="font-size:0" href="{{.UnsubscribeURL}}">Unsubscribe</a>{{end}}`
	c = mustCompile(t, tmpl)
	if c.CheckUnsubscribeLink() == nil {
		t.Fatal("a font-size:0 link passed the visibility check")
	}
	p.Contact.Attributes = map[string]any{"plan": ""}
	if _, err := c.Render(p); err == nil || !strings.Contains(err.Error(), "no unsubscribe link for this contact") {
		t.Errorf("content whose link a newer rule calls hidden, for a contact the link's branch leaves out: %v; want refused", err)
	}
}
