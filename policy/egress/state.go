package egress

import (
	"encoding/json"
	"fmt"

	"github.com/hybox-dev/hybox/vault"
	"github.com/hybox-dev/hybox/vault/tproxy"
)

// sealedState is the persisted form of a sandbox's credential vault and
// CA: the vault sealed with the server's vault key, the CA certificate,
// and the CA key sealed with the same key (bound to the sandbox id).
type sealedState struct {
	Vault  []byte `json:"vault"`
	CACert []byte `json:"caCert"`
	CAKey  []byte `json:"caKey"`
}

// SealState returns the persisted form of sandbox id's vault and CA,
// sealed with key (AES-256-GCM): the bytes hold no secret in clear.
//
// # Errors
// Only when sealing fails (a broken key).
func SealState(key vault.Key, id string, v *vault.Vault, ca *tproxy.CA) ([]byte, error) {
	sv, err := v.MarshalSealed(key)
	if err != nil {
		return nil, err
	}
	caKey, err := vault.Seal(key, ca.KeyPEM(), []byte(id))
	if err != nil {
		return nil, err
	}
	return json.Marshal(sealedState{Vault: sv, CACert: ca.CertPEM(), CAKey: caKey})
}

// OpenState restores what SealState wrote for sandbox id.
//
// # Errors
// vault.ErrInvalid when data is not a sealed state, was sealed with
// another key or for another sandbox, or is corrupted; the message says
// which part failed.
func OpenState(key vault.Key, id string, data []byte) (*vault.Vault, *tproxy.CA, error) {
	var st sealedState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, nil, fmt.Errorf("sandbox %s: credential vault: malformed state: %w", id, vault.ErrInvalid)
	}
	v := vault.New()
	if err := v.UnmarshalSealed(key, st.Vault); err != nil {
		return nil, nil, fmt.Errorf("sandbox %s: credential vault: %w", id, err)
	}
	caKey, err := vault.Open(key, st.CAKey, []byte(id))
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %s: CA key: %w", id, err)
	}
	ca, err := tproxy.LoadCA(st.CACert, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %s: CA: %w", id, err)
	}
	return v, ca, nil
}
