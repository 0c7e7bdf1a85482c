"""The training job under the program's own torch.profiler.profile(): writes what the
profiler reports, {event name: count}, to argv[1]."""
import json
import sys

import torch

import train_job

with torch.profiler.profile() as prof:
    train_job.main(10)
counts = {}
for event in prof.events():
    counts[event.name] = counts.get(event.name, 0) + 1
with open(sys.argv[1], "w") as f:
    json.dump(counts, f)
