#!/bin/bash
# run.sh, on a quiet many-core machine, with the payload prepare.sh made:
# round five's measurements, the peers table (Background and a deadline,
# the shared client), BenchmarkPairParts and BenchmarkScriptSteps, each
# written to a file under $OUT. About 5 minutes on 16 cores.
set -u
D=$(pwd)/.device/x
mkdir -p $D && tar xzf .device/payload.tgz -C $D
export PATH=$D/redis:$PATH
cd $D
nproc > $OUT/machine.txt; redis-server --version >> $OUT/machine.txt; uname -a >> $OUT/machine.txt
# 1. the peers table, 3 reps of 2 s, and the shared client with 8 and 64 goroutines
timeout 300 ./bench -reps 3 -seconds 2 -scale '' -queue '' -permits '' -shared 8,64 \
  -only redislock,fairlock/,redisson-port/fair > $OUT/peers.txt 2> $OUT/peers.err
echo "peers rc=$?" >> $OUT/machine.txt
# 2. the pair taken apart, interleaved blocks
timeout 120 ./bench.test -test.run XXX -test.bench PairParts -test.benchtime 100x -test.count 3 > $OUT/parts.txt 2>&1
echo "parts rc=$?" >> $OUT/machine.txt
# 3. what each guarantee costs inside the scripts
timeout 150 ./lua.test -test.run XXX -test.bench ScriptSteps -test.benchtime 5x -test.count 2 > $OUT/steps.txt 2>&1
echo "steps rc=$?" >> $OUT/machine.txt
