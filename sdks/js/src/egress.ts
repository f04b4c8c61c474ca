// The egress API of a sandbox: its network policy and its credential vault.
import type { Sandbox } from "./sandbox.js";
import { enc } from "./sandbox.js";
import type { CallOptions } from "./transport.js";
import type {
  EgressRule,
  NetworkPolicy,
  PolicyStatus,
  VaultBindingInfo,
  VaultBindingList,
  VaultCreateRequest,
  VaultCredentialInfo,
  VaultCredentialList,
  VaultPatchRequest,
  VaultState,
} from "./types.js";

/** A sandbox's network egress policy. */
export class Egress {
  constructor(private readonly sb: Sandbox) {}

  /** The policy in force and its mode (`allow_all`, `deny_all`, `enforcing`). */
  async getPolicy(opts: CallOptions = {}): Promise<PolicyStatus> {
    return (await this.sb.egressApi(opts)).json<PolicyStatus>({ method: "GET", path: "/policy", ...opts });
  }

  /** Replaces the policy; it is in force when the call returns. */
  async setPolicy(policy: NetworkPolicy, opts: CallOptions = {}): Promise<PolicyStatus> {
    return (await this.sb.egressApi(opts)).json<PolicyStatus>({ method: "PUT", path: "/policy", json: policy, ...opts });
  }

  /** Adds rules, which take priority over the existing ones. */
  async patchRules(rules: EgressRule[], opts: CallOptions = {}): Promise<PolicyStatus> {
    return (await this.sb.egressApi(opts)).json<PolicyStatus>({ method: "PATCH", path: "/policy", json: rules, ...opts });
  }

  /** Removes the rules for these targets. */
  async removeRules(targets: string[], opts: CallOptions = {}): Promise<PolicyStatus> {
    return (await this.sb.egressApi(opts)).json<PolicyStatus>({ method: "DELETE", path: "/policy", json: targets, ...opts });
  }
}

/** A sandbox's credential vault: secrets the server injects into matching requests. */
export class Vault {
  constructor(private readonly sb: Sandbox) {}

  /** Creates the vault. @throws ConflictError (`VAULT_EXISTS`, `CREDENTIAL_PROXY_DISABLED`). */
  async create(req: VaultCreateRequest, opts: CallOptions = {}): Promise<VaultState> {
    return this.call("POST", "", req, opts);
  }
  /** The vault's state (secret values are never returned). @throws NotFoundError without a vault. */
  async get(opts: CallOptions = {}): Promise<VaultState> {
    return this.call("GET", "", undefined, opts);
  }
  /** Adds, replaces and deletes credentials and bindings. @throws ConflictError (`REVISION_CONFLICT`). */
  async patch(req: VaultPatchRequest, opts: CallOptions = {}): Promise<VaultState> {
    return this.call("PATCH", "", req, opts);
  }
  /** Deletes the vault. */
  async delete(opts: CallOptions = {}): Promise<void> {
    await (await this.sb.egressApi(opts)).call({ method: "DELETE", path: "/credential-vault", ...opts });
  }
  /** The credentials (names and revisions). */
  async credentials(opts: CallOptions = {}): Promise<VaultCredentialList> {
    return this.call("GET", "/credentials", undefined, opts);
  }
  /** One credential. */
  async credential(name: string, opts: CallOptions = {}): Promise<VaultCredentialInfo> {
    return this.call("GET", `/credentials/${enc(name)}`, undefined, opts);
  }
  /** The bindings. */
  async bindings(opts: CallOptions = {}): Promise<VaultBindingList> {
    return this.call("GET", "/bindings", undefined, opts);
  }
  /** One binding. */
  async binding(name: string, opts: CallOptions = {}): Promise<VaultBindingInfo> {
    return this.call("GET", `/bindings/${enc(name)}`, undefined, opts);
  }

  private async call<T>(method: string, suffix: string, body: unknown, opts: CallOptions): Promise<T> {
    return (await this.sb.egressApi(opts)).json<T>({ method, path: "/credential-vault" + suffix, json: body, ...opts });
  }
}
