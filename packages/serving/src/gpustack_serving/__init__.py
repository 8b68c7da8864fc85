"""What both daemons' secure ports share, so the Device Manager and the worker serve alike.

- :mod:`gpustack_serving.certs`: the serving pair (``--cert-dir`` or self-signed), the names a
  self-signed certificate carries, and :class:`~gpustack_serving.certs.CertReloader`, which hands
  a rotated pair to whatever terminates TLS;
- :mod:`gpustack_serving.config`: hypercorn's settings (no access log, its messages through our
  logging, a 2 s graceful close) and the TLS ones where hypercorn terminates TLS itself;
- :mod:`gpustack_serving.signals`: the CLI's foreground mode, until SIGTERM or SIGINT.

How each daemon terminates TLS stays its own (hypercorn's ``ssl`` with reloadable contexts in the
Device Manager, pyOpenSSL in the worker, which must see client certificates): this package only
holds what they did twice.
"""
