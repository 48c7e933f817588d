"""Certificates made for a test: an authority and the files one node's ``[tls]`` names."""

from __future__ import annotations

from pathlib import Path

import trustme

__all__ = ["HOST", "Pki"]

HOST = "127.0.0.1"


class Pki:
    """A certificate authority and the files one node's ``[tls]`` names."""

    def __init__(self, where: Path, name: str = "ca") -> None:
        self.where = where
        self.ca = trustme.CA(organization_name=f"dynamiq test {name}")
        self.ca_file = where / f"{name}.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.cert_file, self.key_file = where / "node.pem", where / "node.key"
        self.issue(self.ca)

    def issue(self, ca: trustme.CA) -> None:
        """Write a certificate for the loopback address, signed by ``ca``, as the node's."""
        cert = ca.issue_cert(HOST, "localhost")
        cert.cert_chain_pems[0].write_to_path(str(self.cert_file))
        cert.private_key_pem.write_to_path(str(self.key_file))

    def client_cert(self) -> tuple[str, str]:
        """A client certificate this authority signed, as ``(certfile, keyfile)``."""
        cert = self.ca.issue_cert("client.example")
        paths = (self.where / "client.pem", self.where / "client.key")
        cert.cert_chain_pems[0].write_to_path(str(paths[0]))
        cert.private_key_pem.write_to_path(str(paths[1]))
        return str(paths[0]), str(paths[1])

    def flags(self, *more: str) -> list[str]:
        return ["--tls-certfile", str(self.cert_file), "--tls-keyfile", str(self.key_file), *more]
