"""The bash reader (planner/readers/bash/): arithmetic `for (( init; cond; step ))` loops, as
DeepSpeed's multi-node scripts write them (`for (( node = 0; node < N; node++ ))`), parse and
run, turn by turn, within MAX_ITERATIONS. Expected values are counted out in each row."""

from __future__ import annotations

import textwrap

import pytest

from planner.errors import SpecError
from planner.readers import bash as shell

# (script, variable, value): the value bash leaves, derived in the comment
LOOPS = [
    # node 0, 1, 2 appended: " n0 n1 n2"; node ends at 3 (the failing test)
    (
        'N=3\nH=\nfor (( node = 0; node < N; node++ )); do\n  H="$H n$node"\ndone\n',
        "H",
        " n0 n1 n2",
    ),
    ("N=3\nfor (( node = 0; node < N; node++ )); do :; done\n", "node", "3"),
    # i = 0, 2, 4 < 6: three turns
    ("N=3\nC=0\nfor ((i=0;i<N*2;i+=2)); do C=$((C+1)); done\n", "C", "3"),
    # $N expanded before the arithmetic; --i counts down 4, 3, 2, 1: 4+3+2+1 = 10
    ("N=4\nS=0\nfor ((i=$N; i>0; --i)); do S=$((S+i)); done\n", "S", "10"),
    # a comma list: i up, j down; stops when i reaches j (0,5 1,4 2,3 -> three turns)
    ("T=0\nfor ((i=0, j=5; i<j; i++, j--)); do T=$((T+1)); done\n", "T", "3"),
    # a false condition: no turn
    ("X=no\nfor ((i=0; i<0; i++)); do X=yes; done\n", "X", "no"),
    # `do` on the next line
    ("K=0\nfor ((i=0; i<2; i++))\ndo\n  K=$((K+1))\ndone\n", "K", "2"),
]


@pytest.mark.parametrize("text,name,value", LOOPS, ids=[str(k) for k in range(len(LOOPS))])
def test_arithmetic_for_loops_run_like_bash(text, name, value):
    script = shell.run(text)
    assert script.problems == []
    assert script.var(name) == value


def test_a_condition_planner_cannot_evaluate_reads_the_body_once_and_says_so():
    script = shell.run("for ((j=0; j<NODES; j++)); do Y=$j; done\n")
    assert script.var("Y") == "0"
    assert len(script.notes) == 1 and "read its body once" in script.notes[0]


def test_an_endless_arithmetic_loop_stops_at_the_iteration_limit():
    with pytest.raises(SpecError, match="loop turns"):
        shell.run("for ((;;)); do Z=1; done\n")


def test_a_deepspeed_hostfile_loop_before_the_launch():
    text = textwrap.dedent("""\
        NUM_NODES=2
        for (( node = 0; node < NUM_NODES; node++ )); do
          echo "worker-$node slots=8" >> hostfile
        done
        deepspeed --num_nodes $NUM_NODES --num_gpus 8 pretrain_gpt.py --num-layers 2
    """)
    script = shell.run(text)
    assert script.problems == []
    launch = [c for c in script.commands if c.words and c.words[0] == "deepspeed"]
    assert launch and launch[0].words[2] == "2"
