"""--torch names pytrace's ITT collector to torch only while torch is imported: the program,
before and after `import torch`, and the children it starts see the environment they see
untraced (INTEL_LIBITTNOTIFY64 and INTEL_ITTNOTIFY_GROUPS unset), and the ops are recorded."""
import os
import subprocess

import torchkit

JOB = r'''
import os, subprocess, sys
show = lambda: (os.environ.get("INTEL_LIBITTNOTIFY64"), os.environ.get("INTEL_ITTNOTIFY_GROUPS"))
print("before", show())
import torch
print("after", show())
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('INTEL_LIBITTNOTIFY64'))"],
                       capture_output=True, text=True)
print("child", child.stdout.strip())
torch.add(torch.ones(2), torch.ones(2))
'''


def test_program_and_children_see_their_own_environment(tmp_path):
    torchkit.need_torch()
    tmp = str(tmp_path)
    job = os.path.join(tmp, "env_job.py")
    with open(job, "w") as f:
        f.write(JOB)
    untraced = torchkit.run([torchkit.PY, job], cwd=tmp).stdout
    stats, _err = torchkit.record(tmp, "env", [job])
    traced = subprocess.run([torchkit.PY, "-m", "pytrace", "run", "--torch", job],
                            cwd=tmp, capture_output=True, text=True, env=torchkit.env(), timeout=300)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == untraced, (traced.stdout, untraced)
    assert "before (None, None)" in untraced and "child None" in untraced
    assert torchkit.span_counts(stats).get("aten::add") == 1, torchkit.span_counts(stats)
