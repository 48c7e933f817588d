"""AWS credentials: their shapes, their secrets sealed under the cluster's key and
unsealed only for their own id, the key rotated, and applications' accounts."""

from __future__ import annotations

import re

from dynamiq.access.credentials import (
    ACCESS_KEY_ID,
    account_of,
    new_credential,
    rotate_sealing_key,
    sealer_of,
)
from dynamiq.access.keys import KeyRing, KeySpec
from dynamiq.storage.lmdb import LmdbBackend


def test_a_credential_looks_like_aws_s() -> None:
    key_id, secret = new_credential()
    assert ACCESS_KEY_ID.fullmatch(key_id) and len(key_id) == 20
    assert re.fullmatch(r"[A-Za-z0-9+/]{40}", secret)
    assert new_credential() != (key_id, secret)


def test_an_application_s_account_is_stable_and_its_own() -> None:
    assert account_of("shop") == account_of("shop") == "487814878728"
    assert re.fullmatch(r"\d{12}", account_of("billing"))
    assert len({account_of(f"app{i}") for i in range(1000)}) == 1000


async def test_a_sealed_secret_opens_for_its_own_id_only(store: LmdbBackend) -> None:
    sealer = await sealer_of(store)
    key_id, secret = new_credential()
    sealed = sealer.seal(key_id, secret)
    assert secret.encode() not in sealed
    assert sealer.unseal(key_id, sealed) == secret
    assert sealer.unseal(new_credential()[0], sealed) is None  # moved to another id
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    assert sealer.unseal(key_id, tampered) is None
    assert (await sealer_of(store)).key_id == sealer.key_id  # one key for the cluster


async def test_after_a_rotation_the_old_key_still_opens_until_the_next(store: LmdbBackend) -> None:
    first = await sealer_of(store)
    key_id, secret = new_credential()
    sealed = first.seal(key_id, secret)
    second = await rotate_sealing_key(store)
    assert second.key_id != first.key_id and second.sealed_with(sealed) == first.key_id
    assert second.unseal(key_id, sealed) == secret
    third = await rotate_sealing_key(store)
    assert third.unseal(key_id, sealed) is None  # two rotations on: gone


async def test_the_ring_seals_again_and_another_node_reads_it(store: LmdbBackend) -> None:
    ring, other = KeyRing(store), KeyRing(store)
    await ring.reload()
    made = await ring.create(KeySpec("shop", "produce", aws=True))
    access = made.record.access_key_id
    assert access is not None and made.aws_secret is not None
    raw = await store.meta_get(f"k/{made.record.key_id}")
    assert raw is not None and made.aws_secret.encode() not in raw  # sealed at rest
    await other.reload()
    assert other.signing(access) == (made.record, made.aws_secret)
    await ring.rotate_sealing_key()
    await ring.rotate_sealing_key()  # the first key is gone: every secret sealed again
    await other.reload()
    found = other.signing(access)
    assert found is not None and found[1] == made.aws_secret
    await ring.revoke(made.record.key_id)
    await other.reload()
    assert other.signing(access) is None
