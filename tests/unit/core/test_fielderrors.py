"""The status a webhook refuses field errors with: kube-apiserver's 403 or 422."""

from gpustack_core.fielderrors import forbidden, invalid, refusal_status, required


def test_only_forbidden_errors_are_a_403_anything_else_a_422() -> None:
    gate = forbidden("spec.privileged", "instance-privileged-allowed is false")
    moved = forbidden("spec.product", "field is immutable")
    assert refusal_status([gate, moved]) == (403, "Forbidden")
    assert refusal_status([gate, invalid("spec.resources.cpu", "-1", "must be positive")]) == (
        422,
        "Invalid",
    )
    assert refusal_status([required("spec.type", "an Instance names its type")]) == (
        422,
        "Invalid",
    )
