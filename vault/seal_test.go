package vault

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testKey(t testing.TB) Key {
	t.Helper()
	k, err := GenerateKey()
	require.NoError(t, err)
	return k
}

func TestSealRoundTrip(t *testing.T) {
	key := testKey(t)
	v := New()
	req := basicReq()
	req.Bindings = append(req.Bindings, Binding{Name: "subst",
		Match: Match{Hosts: []string{"*.example.com"}, Ports: []int{8443}, Methods: []string{"GET"}, Paths: []string{"/v1/*"}},
		Auth:  Auth{Type: AuthCustomHeaders, Headers: []HeaderEntry{{Name: "X-A", Credential: "other"}}, Substitutions: []Substitution{{Credential: "gh", Placeholder: "P", In: []string{"header"}}}}})
	_, err := v.Create(req, allowAll)
	require.NoError(t, err)
	_, err = v.Patch(PatchRequest{Credentials: &CredentialMutations{Replace: []Credential{cred("other", "rotated-value")}}}, allowAll)
	require.NoError(t, err)
	want, err := v.Get()
	require.NoError(t, err)

	blob, err := v.MarshalSealed(key)
	require.NoError(t, err)
	assert.False(t, bytes.Contains(blob, []byte("ghp_secret_one")))
	assert.False(t, bytes.Contains(blob, []byte("rotated-value")))
	blob2, err := v.MarshalSealed(key)
	require.NoError(t, err)
	assert.NotEqual(t, blob, blob2, "each seal uses a fresh nonce")

	w := New()
	require.NoError(t, w.UnmarshalSealed(key, blob))
	got, err := w.Get()
	require.NoError(t, err)
	assert.Equal(t, want, got)
	in := injectFor(t, w, "GET", "https://api.github.com/")
	assert.Equal(t, []string{"ghp_secret_one"}, in.Secrets)
	in = injectFor(t, w, "GET", "https://x.example.com:8443/v1/a")
	assert.Equal(t, "subst", in.Binding)
	assert.Contains(t, in.Secrets, "rotated-value")

	// A never-created vault seals and opens as not created.
	empty, err := New().MarshalSealed(key)
	require.NoError(t, err)
	require.NoError(t, w.UnmarshalSealed(key, empty))
	_, err = w.Get()
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestSealRefusals(t *testing.T) {
	key := testKey(t)
	v := New()
	_, err := v.Create(basicReq(), allowAll)
	require.NoError(t, err)
	blob, err := v.MarshalSealed(key)
	require.NoError(t, err)

	flip := func(i int) []byte {
		b := bytes.Clone(blob)
		b[i] ^= 1
		return b
	}
	tests := []struct {
		name string
		key  Key
		data []byte
		want string
	}{
		{"wrong key", testKey(t), blob, "wrong key or corrupted data"},
		{"tampered ciphertext", key, flip(len(blob) - 20), "wrong key or corrupted data"},
		{"tampered tag", key, flip(len(blob) - 1), "wrong key or corrupted data"},
		{"tampered nonce", key, flip(len(sealMagic) + 2), "wrong key or corrupted data"},
		{"other version", key, flip(len(sealMagic)), "unknown version"},
		{"bad magic", key, flip(0), "not a sealed credential vault"},
		{"truncated", key, blob[:len(sealMagic)+5], "truncated"},
		{"empty", key, nil, "not a sealed credential vault"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := New()
			_, err := w.Create(CreateRequest{Credentials: []Credential{cred("keep", "kept")}}, allowAll)
			require.NoError(t, err)
			err = w.UnmarshalSealed(tt.key, tt.data)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
			st, err := w.Get()
			require.NoError(t, err)
			assert.Equal(t, "keep", st.Credentials[0].Name, "a failed open leaves the vault unchanged")
		})
	}
}

func writeKeyFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

func TestLoadKey(t *testing.T) {
	var want Key
	for i := range want {
		want[i] = byte(i * 7)
	}
	hexKey := hex.EncodeToString(want[:])
	tests := []struct {
		name string
		path string
		env  string
		err  error
		msg  string
	}{
		{"hex env", "", hexKey, nil, ""},
		{"upper hex with spaces", "", "  " + strings.ToUpper(hexKey) + "\n", nil, ""},
		{"base64 std", "", base64.StdEncoding.EncodeToString(want[:]), nil, ""},
		{"base64 raw", "", base64.RawStdEncoding.EncodeToString(want[:]), nil, ""},
		{"file", writeKeyFile(t, hexKey+"\n", 0o600), "ignored", nil, ""},
		{"file 0400", writeKeyFile(t, base64.StdEncoding.EncodeToString(want[:]), 0o400), "", nil, ""},
		{"empty env", "", "", ErrNoKey, "the credential vault needs a key: set"},
		{"blank env", "", " \n\t", ErrNoKey, "needs a key"},
		{"empty file", writeKeyFile(t, "\n", 0o600), hexKey, ErrNoKey, "is empty"},
		{"group readable", writeKeyFile(t, hexKey, 0o640), "", ErrInvalid, "accessible by group or others; run chmod 600"},
		{"world readable", writeKeyFile(t, hexKey, 0o604), "", ErrInvalid, "mode 0604"},
		{"short hex", "", hexKey[:62], ErrInvalid, "not a 32-byte key"},
		{"bad hex", "", "zz" + hexKey[2:], ErrInvalid, "not a 32-byte key"},
		{"base64 of 16 bytes", "", base64.StdEncoding.EncodeToString(want[:16]), ErrInvalid, "not a 32-byte key"},
		{"passphrase", "", "correct horse battery staple", ErrInvalid, "not a 32-byte key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := LoadKey(tt.path, tt.env)
			if tt.err == nil {
				require.NoError(t, err)
				assert.Equal(t, want, k)
				return
			}
			require.ErrorIs(t, err, tt.err)
			assert.Contains(t, err.Error(), tt.msg)
			assert.NotContains(t, err.Error(), hexKey[:16], "never echo key material")
			assert.NotContains(t, err.Error(), "horse")
		})
	}
	_, err := LoadKey(filepath.Join(t.TempDir(), "missing"), hexKey)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestSealOpenBlob(t *testing.T) {
	key := testKey(t)
	plain := []byte("-----BEGIN PRIVATE KEY-----")
	blob, err := Seal(key, plain, []byte("sandbox-1"))
	require.NoError(t, err)
	assert.False(t, bytes.Contains(blob, plain))
	got, err := Open(key, blob, []byte("sandbox-1"))
	require.NoError(t, err)
	assert.Equal(t, plain, got)

	for name, try := range map[string]func() ([]byte, error){
		"other aad": func() ([]byte, error) { return Open(key, blob, []byte("sandbox-2")) },
		"wrong key": func() ([]byte, error) { return Open(testKey(t), blob, []byte("sandbox-1")) },
		"tampered": func() ([]byte, error) {
			b := bytes.Clone(blob)
			b[len(b)-3] ^= 0x80
			return Open(key, b, []byte("sandbox-1"))
		},
		"a vault blob": func() ([]byte, error) { b, _ := New().MarshalSealed(key); return Open(key, b, nil) },
		"garbage":      func() ([]byte, error) { return Open(key, []byte("hello"), nil) },
	} {
		_, err := try()
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
	err = New().UnmarshalSealed(key, blob)
	assert.ErrorIs(t, err, ErrInvalid, "a blob is not a vault")
}

func TestGenerateKey(t *testing.T) {
	a, b := testKey(t), testKey(t)
	assert.NotEqual(t, a, b)
	assert.NotEqual(t, Key{}, a)
}

// sealRaw encrypts an arbitrary plaintext the way MarshalSealed does, so
// the fuzzer reaches the decoder and the validation behind the AEAD.
func sealRaw(t testing.TB, key Key, plain []byte) []byte {
	aead, err := newAEAD(key)
	require.NoError(t, err)
	header := append([]byte(sealMagic), sealVersion)
	nonce := make([]byte, aead.NonceSize())
	return aead.Seal(append(bytes.Clone(header), nonce...), nonce, plain, header)
}

func FuzzUnmarshalSealed(f *testing.F) {
	var key Key
	copy(key[:], "fuzz-key-fuzz-key-fuzz-key-fuzz!")
	v := New()
	if _, err := v.Create(basicReq(), allowAll); err != nil {
		f.Fatal(err)
	}
	blob, err := v.MarshalSealed(key)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(blob)
	f.Add([]byte(sealMagic + "\x01"))
	f.Add([]byte{})
	f.Add([]byte(`{"created":true,"revision":1,"credentials":[{"name":"a","sourceType":"inline","value":"v","revision":1}],` +
		`"bindings":[{"binding":{"name":"b","match":{"hosts":["a.com"]},"auth":{"type":"bearer","credential":"a"}},"revision":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, sealRaw(t, key, data)} {
			w := New()
			if err := w.UnmarshalSealed(key, in); err != nil {
				require.ErrorIs(t, err, ErrInvalid)
				continue
			}
			// Whatever opens is a consistent, usable vault.
			if _, err := w.Get(); err != nil {
				require.ErrorIs(t, err, ErrNotFound)
				continue
			}
			_, _ = w.Match(Request{Scheme: "https", Host: "a.com", Method: "GET", Path: "/"})
			_, err := w.MarshalSealed(key)
			require.NoError(t, err)
		}
	})
}
