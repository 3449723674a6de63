#!/usr/bin/env python3
"""Writes providers/data/aws-managed-policies.json: the AWS managed policies terrain's
IAM checks and the sandbox's IAM know, copied from the catalog moto ships
(moto/iam/aws_managed_policies.py), with its version and the sha256 of that file.

    python3 scripts/managed-policies.py            # compare with the installed moto
    python3 scripts/managed-policies.py --write    # replace the copy

Only the families an ML batch stack attaches are kept (EKS, ECR, SageMaker, S3, the
EBS/EFS CSI drivers, SSM, the broad job-function policies): the whole catalog is 4 MB.
"""
import hashlib
import importlib.util
import json
import os
import re
import sys

KEEP = re.compile(
    r"^(AmazonEKS|AmazonEC2ContainerRegistry|AmazonSageMaker|AmazonS3|AmazonEBSCSIDriverPolicy"
    r"|AmazonEFSCSIDriverPolicy|AdministratorAccess$|PowerUserAccess$|ReadOnlyAccess$"
    r"|AWSKeyManagementServicePowerUser$|CloudWatchAgentServerPolicy$"
    r"|AmazonSSMManagedInstanceCore$|ElasticLoadBalancingFullAccess$|AmazonVPCFullAccess$"
    r"|AmazonEC2FullAccess$|IAMFullAccess$)"
)
OUT = os.path.join(os.path.dirname(__file__), "..", "providers", "data", "aws-managed-policies.json")


def main() -> int:
    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        print("moto is not installed: run scripts/deps.sh", file=sys.stderr)
        return 1
    root = list(spec.submodule_search_locations)[0]
    path = os.path.join(root, "iam", "aws_managed_policies.py")
    raw = open(path, "rb").read()
    scope: dict = {}
    exec(compile(raw, path, "exec"), scope)
    catalog = json.loads(scope["aws_managed_policies_data"])
    import importlib.metadata as md

    out = {
        "source": "moto/iam/aws_managed_policies.py",
        "moto": md.version("moto"),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "kept": KEEP.pattern,
        "policies": {
            name: {
                "path": p["Path"],
                "version": p["DefaultVersionId"],
                "updated": p["UpdateDate"],
                "document": p["Document"],
            }
            for name, p in sorted(catalog.items())
            if KEEP.match(name)
        },
    }
    text = json.dumps(out, indent=1, sort_keys=False) + "\n"
    if "--write" in sys.argv:
        open(OUT, "w").write(text)
        print(f"wrote {len(out['policies'])} policies from moto {out['moto']}")
        return 0
    current = open(OUT).read() if os.path.exists(OUT) else ""
    if current != text:
        print("providers/data/aws-managed-policies.json differs from the installed moto's catalog", file=sys.stderr)
        return 1
    print("up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
