#!/usr/bin/env bash
# One device call, several steps: each step runs under its own time limit and writes $OUT/<step>.txt, so a slow
# or hung step costs only its own limit and the others still come back.
#
#   bash scripts/device_batch.sh bench overlap tp small      # on the device, from the repository root
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/smgemm-out}
mkdir -p "$OUT"
PY=python3
MX64="64x64x256 w4 s3 sk;64x128x256 w8 s3 sk;64x64x512 w4 s2 sk;64x64x256 w4 s3 dp;64x128x128 w4 s4 dp;64x64x128 w4 s4 sk"
MX64="$MX64;32x64x256 w4 s4 sk;16x64x512 w4 s4 sk"
FEWTILE="64x64x64 w4 s4 sk;64x128x64 w4 s4 sk;128x64x64 w4 s4 sk;128x128x64 w8 s4 tma sk;128x128x128 w8 s3 tma sk"
FEWTILE="$FEWTILE;128x256x64 w8 s3 tma sk;64x64x128 w4 s4 sk;128x128x64 w4 s4 sk;64x128x128 w4 s4 sk"
FIXUP="128x128x64 w8 s4 tma sk;128x256x64 w8 s3 tma sk;128x64x128 w4 s4 sk;64x128x64 w4 s4 sk"
ALIGN="128x128x64 w8 s4 tma sk;128x64x64 w4 s4 sk;64x128x64 w4 s4 sk;128x64x64 w4 s6 tma sk;128x128x64 w4 s4 sk"

# plans that stop 20's planner changed (scripts/probe_sk_split.py), all but the fp32 ones after the third
SKCASES2="bf16 16x6144x4096 66,fp32 16x6144x4096 66,bf16 16x8192x8192 100,fp8 16x8192x8192 100,fp32 16x8192x8192 100,\
bf16 16x8192x28672 100,fp8 16x8192x28672 100,fp32 16x8192x28672 100,bf16 16x10240x8192 132,\
bf16 16x10240x8192 66,bf16 16x10240x8192 100,fp8 16x10240x8192 132,fp8 16x10240x8192 66,fp8 16x10240x8192 100,\
bf16 16x28672x4096 132,bf16 16x28672x4096 100,fp8 16x28672x4096 132,fp8 16x28672x4096 100,\
fp8 32x4096x14336 100,bf16 32x10240x8192 132,bf16 32x10240x8192 100,bf16 64x8192x8192 100,\
fp8 64x10240x8192 66,bf16 64x28672x4096 66,bf16 64x28672x4096 100,bf16 128x4096x8192 100,\
fp8 128x4096x14336 100,bf16 128x6144x4096 66,bf16 128x10240x8192 100,fp8 128x10240x8192 132,\
fp8 128x10240x8192 66,bf16 128x14336x4096 100,fp8 256x8192x8192 100,bf16 1024x1024x16384 100,\
bf16 1024x4096x4096 100,fp8 1024x4096x14336 100,fp8 1024x8192x8192 100,bf16 1024x10240x8192 100,\
fp8 1024x10240x8192 100,bf16 2048x2560x4096 132,bf16 2048x2560x4096 100,bf16 2560x2560x8192 66,\
fp8 2560x2560x8192 32,fp8 2560x2560x8192 66,bf16 3072x3072x4096 132,bf16 3072x3072x4096 66,\
bf16 3072x3072x8192 132,fp8 3072x3072x8192 132,fp8 3072x3072x8192 66,fp8 3072x3072x16384 132,\
bf16 4096x4096x4096 100,fp8 4096x4096x4096 100,bf16 4096x4096x14336 100,fp8 4096x4096x14336 100,\
bf16 4096x4352x4096 132,bf16 4096x4352x4096 66,fp8 4096x4352x4096 132,bf16 4096x8192x8192 100,\
fp8 4096x8192x8192 100,bf16 5120x4352x4096 132,fp8 5120x4352x4096 132,bf16 6144x4352x4096 132,\
bf16 6144x4352x4096 100,bf16 8192x4096x4096 100,fp8 8192x4096x14336 100"

step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "=== $name (limit ${limit}s)"
  timeout -k 5 "$limit" "$@" >"$OUT/$name.txt" 2>&1
  echo "=== $name rc=$? $((SECONDS - start))s"
}

nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for s in "$@"; do
  case $s in
    bench) step bench 300 $PY -m smgemm bench --suite llm,square --dtype bf16,fp16 --num-sms 16,32,66,100,132 \
             --plot "$OUT/sm_scaling.png" ;;
    benchbf16) step benchbf16 220 $PY -m smgemm bench --suite llm,square --dtype bf16 --num-sms 16,32,66,100,132 \
             --plot "$OUT/sm_scaling.png" ;;
    fp8) step fp8 200 $PY -m smgemm bench --suite llm,square --dtype fp8 --num-sms 66 --plot '' --no-overhead --mxfp4 ;;
    overlap) step overlap 120 $PY -m smgemm bench overlap --plot "$OUT/overlap.png" ;;
    tp) step tp 150 bash -c "$PY -m smgemm bench tp --shape 8192x8192x7168;
                             $PY -m smgemm bench tp --shape 8192x8192x7168 --nccl-channels 8;
                             $PY -m smgemm bench tp --nccl-channels 8" ;;
    tune) step tune "${TUNE_LIMIT:-300}" $PY -m smgemm tune --show 6 --out "$OUT/tuned.json" --shapes "${TUNE_SHAPES:-\
16x6144x4096,16x10240x8192,16x4096x14336,128x6144x4096,128x4096x4096,128x8192x8192,128x4096x14336,\
1024x6144x4096,1024x10240x8192,1024x1024x1024,2048x2048x2048}" ;;
    streamk) step streamk 130 $PY -m smgemm bench --suite streamk --dtype bf16 \
               --schedules auto,streamk,data_parallel,persistent --num-sms '' --plot '' --no-overhead ;;
    sweep) step sweep 240 bash -c "
      $PY scripts/sweep_configs.py --shapes 16x6144x4096,16x10240x8192,16x4096x14336,16x4096x4096 \
        --variants '16x64x128 w4 s4 sk;16x64x256 w4 s4 sk;16x128x128 w4 s4 sk;16x64x128 w4 s6;16x32x256 w4 s4 sk;\
16x64x128 w4 s4 tmaload sk;16x128x128 w4 s4 tmaload sk';
      $PY scripts/sweep_configs.py --shapes 128x6144x4096,128x4096x4096,128x8192x8192,128x4096x14336 \
        --variants '128x128x64 w8 s4 tma sk;128x128x64 w8 s4 tma;128x64x64 w4 s4 tma sk;128x64x128 w4 s4 tmaload sk;\
64x128x64 w4 s4 tma sk;128x256x64 w8 s3 tma sk;64x256x64 w4 s4 tma sk';
      $PY scripts/sweep_configs.py --shapes 1024x6144x4096,1024x10240x8192,1024x1024x1024,2048x2048x2048 \
        --variants '128x256x64 w8 s3 tma;128x256x64 w8 s3 tma sk;128x128x64 w8 s4 tma;128x128x64 w8 s4 tma sk;\
128x128x64 w4 s4 tma;64x128x64 w4 s4 tma'" ;;
    sweep128) step sweep128 200 bash -c "
      $PY scripts/sweep_configs.py --shapes 128x6144x4096,128x4096x4096,128x10240x8192,128x8192x8192 \
        --variants '128x64x64 w4 s6 sk;128x64x128 w4 s4 sk;64x128x128 w4 s4 sk;64x64x128 w4 s4;64x64x128 w4 s6 sk;\
128x32x128 w4 s4 sk;64x128x64 w4 s6 sk;128x128x64 w8 s4 sk';
      $PY scripts/sweep_configs.py --shapes 1024x1024x1024,2048x2048x2048 \
        --variants '64x64x64 w4 s4;64x128x64 w4 s4;128x64x64 w4 s4 sk;64x64x128 w4 s3;128x128x64 w4 s4 tma;\
128x256x64 w8 s4 tma'" ;;
    overlap3) step overlap3 150 bash -c "
      $PY -m smgemm bench overlap --gemv 16,512,4,4 --mem-gb 3 --num-sms 80,88,96,104,112 --plot '';
      $PY -m smgemm bench overlap --gemv 16,512,4,4 --mem-gb 12 --num-sms 64,72,80,88,96 --plot '';
      $PY -m smgemm bench overlap --gemv 8,1024,4,8 --num-sms 72,80,88 --plot ''" ;;
    gputests) step gputests 120 $PY -m pytest -q -p no:cacheprovider -s tests/test_partition.py \
                tests/test_hopper_path.py tests/test_overlap.py tests/test_tp_mlp.py ;;
    gemv) step gemv 120 $PY scripts/sweep_gemv.py
          best=$(tail -n 1 "$OUT/gemv.txt" | sed 's/.*: //')
          step overlap2 120 $PY -m smgemm bench overlap --gemv "$best" --num-sms 48,66,80,88,96,104 \
            --plot "$OUT/overlap.png" ;;
    mxsweep) step mxsweep 230 bash -c "
      $PY -m pytest -q -p no:cacheprovider tests/test_mxfp4_gemm.py -k exact_on_gpu;
      $PY scripts/sweep_mxfp4.py --shapes 1x8192x8192,16x8192x8192,16x4096x4096,16x14336x4096 \
        --variants '16x64x256 w4 s4;16x64x256 w4 s4 split;16x128x256 w4 s4;16x64x512 w4 s4;16x64x256 w4 s4 sk;\
16x32x256 w4 s4 sk;16x128x256 w8 s4 swap;16x64x512 w4 s3 sk;16x128x512 w8 s3;16x64x256 w8 s4'; 
      $PY scripts/sweep_mxfp4.py --shapes 64x8192x8192,64x4096x4096 \
        --variants '64x128x128 w4 s4 sk;64x64x256 w4 s4 sk;64x128x128 w4 s4 swap sk;64x128x256 w8 s3 sk;\
64x256x128 w8 s3 swap sk;64x128x128 w8 s4 sk;64x64x128 w4 s4 sk'" ;;
    mxlarge) step mxlarge 250 bash -c "
      $PY scripts/sweep_mxfp4.py --shapes 4096x4096x4096,8192x8192x8192 \
        --variants '256x128x64 w8 s3 tma swap;128x256x64 w8 s3 tma;256x128x64 w8 s3 tma split swap;\
128x256x64 w8 s3 tma swap;256x128x64 w8 s4 tma swap;128x128x64 w8 s4 tma swap;256x128x128 w8 s2 tma swap';
      $PY scripts/sweep_mxfp4.py --both --shapes 4096x4096x4096 \
        --variants '256x128x64 w8 s3 swap;128x256x64 w8 s3;128x256x64 w8 s3 split;256x128x64 w8 s3 split swap'" ;;
    overlap4) nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.memory --format=csv -lms 200 \
                >"$OUT/smi.csv" 2>&1 &
              smi=$!
              step overlap4 200 bash -c "
      for g in 8,1024,4,8 16,512,4,4; do
        echo \"### gemv \$g \$(date +%T.%N)\"; $PY -m smgemm bench overlap --gemv \$g --num-sms 72,80,88,96,104 --plot '';
      done"
              kill $smi ;;
    fp32) step fp32 200 $PY -m smgemm bench --suite quick,mid --dtype fp32,tf32 --num-sms '' --plot '' --no-overhead ;;
    mid) step mid 150 $PY -m smgemm bench --suite mid --dtype bf16,fp16,fp8 --num-sms '' --plot '' --no-overhead ;;
    mxbench) step mxbench 200 $PY -m smgemm bench --dtype '' --mxfp4 --no-overhead ;;
    placement) step placement 150 $PY scripts/probe_placement.py ;;
    power) step power 60 $PY scripts/overlap_power.py --num-sms 80 ;;
    example) step example 60 $PY examples/overlap.py ;;
    mxpre) step mxpre 200 bash -c "
      $PY scripts/sweep_mxfp4.py --shapes 4096x4096x4096,8192x8192x8192,4096x14336x4096 \
        --variants '256x128x64 w8 s4 swap;256x128x64 w8 s4 swap prefetch;256x128x64 w8 s3 swap prefetch;\
256x128x64 w8 s4 tmaload swap prefetch;256x128x64 w8 s5 swap prefetch;256x128x128 w8 s2 swap prefetch;\
128x256x64 w8 s4 swap prefetch';
      $PY scripts/sweep_mxfp4.py --both --shapes 8192x8192x8192 \
        --variants '256x128x64 w8 s4 swap prefetch;256x128x64 w8 s4 swap;256x128x64 w8 s4 split swap'" ;;
    mxdecode) # decode grids: data-parallel (all tiles resident at once when they fit 2 per SM) against Stream-K
      step mxdecode 200 $PY scripts/sweep_mxfp4.py \
        --shapes 1x4096x4096,16x4096x4096,1x8192x8192,16x14336x4096,1x14336x4096,16x4096x14336,16x28672x4096 \
        --variants '16x64x512 w4 s4 dp;16x32x512 w4 s4 dp;16x64x512 w4 s4 sk;16x32x512 w4 s4 sk;16x64x512 w8 s4 sk;16x64x512 w4 s3 dp'
      step mxdecode2 120 $PY scripts/sweep_mxfp4.py --programs-per-sm 2 --shapes 1x8192x8192,16x4096x14336 \
        --variants '16x64x512 w4 s2 sk;16x64x512 w4 s3 sk;16x64x256 w4 s3 sk' ;;
    mxexpand) # MXFP4 at larger M: two passes (expand, then the dense GEMM) against the fused kernel
      step expand 100 $PY scripts/sweep_expand.py
      shapes=128x4096x4096,256x4096x4096,512x4096x4096,1024x4096x4096,2048x4096x4096,256x14336x4096,1024x14336x4096
      step mxexpand 300 bash -c "
      for e in on off; do $PY scripts/sweep_mxfp4.py --expand \$e --variants '' --shapes $shapes; done;
      $PY scripts/sweep_mxfp4.py --expand on --expand-blocks 128,256,8 --variants '' --shapes $shapes;
      for e in on off; do $PY scripts/sweep_mxfp4.py --both --expand \$e --variants '' \
        --shapes 256x4096x4096,1024x4096x4096,4096x4096x4096,1024x14336x4096; done" ;;
    mx64) step mx64 150 $PY scripts/sweep_mxfp4.py --shapes 64x4096x4096,64x8192x8192,64x14336x4096 \
            --variants "$MX64" ;;
    host) step host 60 $PY scripts/host_overhead.py ;;
    streamk2) step streamk2 200 $PY -m smgemm bench --suite streamk --dtype bf16,fp8 \
               --schedules auto,streamk,data_parallel,persistent --num-sms '' --plot '' --no-overhead ;;
    fewtile) step fewtile 200 $PY scripts/sweep_configs.py --shapes 256x1024x16384,512x512x32768,1024x1024x16384 \
               --variants "$FEWTILE" ;;
    fixup) step fixup 240 bash -c "which ncu nsys; ls /usr/local/cuda/bin 2>/dev/null | tr '\\n' ' '; echo;
             $PY scripts/probe_fixup.py --l2 --shapes 512x512x32768,1024x1024x16384,128x6144x4096,128x10240x8192 \
               --variants '$FIXUP'" ;;
    ncu) step ncu 200 ncu --profile-from-start off --clock-control none --section SpeedOfLight --section LaunchStats \
           --section MemoryWorkloadAnalysis --metrics lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum \
           $PY scripts/profile_shapes.py --shapes "${PROFILE_SHAPES:-512x512x32768,1024x1024x16384,128x6144x4096,\
128x10240x8192,1024x1024x1024}" ;;
    align) step align 240 bash -c "for n in 132 128; do echo num_sms \$n;
             $PY scripts/sweep_configs.py --num-sms \$n --shapes 512x512x32768,1024x1024x16384,256x1024x16384 \
               --variants '$ALIGN'; done" ;;
    align2) step align2 240 bash -c "
      $PY scripts/sweep_mxfp4.py --shapes 1x4096x4096,16x4096x4096,16x4096x14336 \
        --variants '16x64x512 w4 s4 sk;16x64x512 w4 s4 sk noalign';
      $PY scripts/sweep_mxfp4.py --shapes 64x4096x4096,64x8192x8192,64x4096x14336 \
        --variants '64x128x256 w8 s3 sk;64x128x256 w8 s3 sk noalign';
      $PY scripts/sweep_configs.py --shapes 16x4096x14336 --variants '16x64x256 w4 s4 sk;16x64x256 w4 s4 sk noalign';
      $PY scripts/sweep_configs.py --shapes 128x4096x14336,128x4096x8192 \
        --variants '128x64x128 w4 s4 sk;128x64x128 w4 s4 sk noalign;128x128x64 w8 s4 tma sk;128x128x64 w8 s4 tma sk noalign'" ;;
    stages) step stages 240 bash -c "
      $PY scripts/sweep_configs.py --shapes 512x512x32768,1024x1024x16384,256x1024x16384 \
        --variants '128x128x64 w8 s5 tma sk;128x128x64 w8 s6 tma sk;128x128x64 w4 s5 sk;128x128x64 w4 s6 sk;64x128x64 w4 s6 sk;128x64x64 w4 s8 sk';
      $PY scripts/sweep_configs.py --shapes 128x10240x8192,128x6144x4096 \
        --variants '128x64x64 w4 s6 sk;128x64x64 w4 s8 sk;128x64x128 w4 s3 sk;128x64x64 w4 s6;128x64x64 w4 s8;128x64x128 w4 s4 tmaload sk';
      $PY scripts/sweep_configs.py --shapes 1024x1024x1024 \
        --variants '128x64x64 w4 s6;128x64x64 w4 s8;128x64x64 w4 s4 tmaload;128x64x64 w4 s6 tmaload;64x128x64 w4 s6;128x128x64 w8 s4 tma sk'" ;;
    fp8sk) step fp8sk 200 bash -c "
      $PY scripts/sweep_configs.py --dtype fp8 --shapes 3072x3072x8192,2560x2560x8192 \
        --variants '128x128x128 w8 s4 tma;128x128x128 w8 s4 tma sk;128x256x128 w8 s3 tma;128x256x128 w8 s3 tma sk';
      $PY scripts/sweep_configs.py --dtype fp8 --shapes 16x28672x4096 --variants '16x64x512 w4 s4;16x64x512 w4 s4 sk';
      $PY scripts/sweep_configs.py --dtype fp8 --num-sms 66 --shapes 256x1024x16384,128x10240x8192,3072x3072x8192 \
        --variants '64x64x128 w4 s4;128x128x128 w8 s4 tma sk;128x64x256 w4 s4;128x64x256 w4 s4 sk;128x256x128 w8 s3 tma;128x256x128 w8 s3 tma sk'" ;;
    skinny) # M = 128: 128 x 256 tiles under Stream-K over a grid aligned to the tiles (parts need not divide K)
      step skinny 280 $PY scripts/sweep_configs.py \
        --shapes 128x10240x8192,128x6144x4096,128x4096x4096,128x8192x8192,128x4096x14336,128x8192x28672 \
        --variants "128x256x64 w8 s3 tma sk;128x256x64 w8 s3 tma sk noalign;128x256x64 w8 s4 tma sk;\
128x128x64 w8 s4 tma sk;64x256x64 w4 s4 tma sk;128x256x128 w8 s2 tma sk" ;;
    ncu2) # where the time of an MXFP4 decode launch and a skinny launch goes: stall reasons, pipe use
      step ncu2 240 bash -c "ncu --profile-from-start off --clock-control none --section SpeedOfLight \
          --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats --section Occupancy \
          $PY scripts/profile_shapes.py --mxfp4 --shapes 16x8192x8192;
        ncu --profile-from-start off --clock-control none --section SpeedOfLight --section WarpStateStats \
          --section MemoryWorkloadAnalysis $PY scripts/profile_shapes.py --shapes 128x10240x8192" ;;
    ncu3) # MXFP4: decode stall reasons and pipe use at 1, 2 programs per SM and 8 warps; the two-pass both-MXFP4 GEMM
      NCUM="--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,\
regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active"
      step ncu3 240 bash -c "
        for v in '16x64x512 w4 s4 sk|1' '16x64x512 w4 s4 sk|2' '16x128x512 w8 s3 sk|1'; do echo \"### \$v\";
          ncu --profile-from-start off --clock-control none -k regex:gemm_kernel --section SpeedOfLight $NCUM \
            $PY scripts/profile_shapes.py --mxfp4 --shapes 16x8192x8192 --config \"\${v%|*}\" \
            --programs-per-sm \${v#*|}; done;
        ncu --profile-from-start off --clock-control none --section SpeedOfLight \
          $PY scripts/profile_shapes.py --mxfp4 --both --shapes 4096x4096x4096" ;;
    expand2) step expand2 150 $PY scripts/sweep_expand.py \
               --variants "128,512,8;128,512,16;256,512,16" ;;
    mx64swap) # M = 64: the weight tile as the wgmma's register operand (swap) and / or expanded a step ahead (prefetch)
      step mx64swap 240 $PY scripts/sweep_mxfp4.py --shapes 64x4096x4096,64x8192x8192,64x14336x4096 \
        --variants "64x128x256 w8 s3 sk prefetch;64x128x256 w8 s3 sk swap;64x128x256 w8 s3 sk swap prefetch;\
64x128x128 w8 s4 sk swap prefetch;64x256x128 w8 s3 sk swap prefetch;64x128x256 w4 s3 sk swap;64x64x256 w4 s3 sk swap" ;;
    dec32) # decode: 16 x 32 data-parallel tiles where 16 x 64 tiles are fewer than the SMs (stop 13 saw 11.7 vs 13.9 us)
      step dec32 200 $PY scripts/sweep_mxfp4.py \
        --shapes 1x4096x4096,16x4096x4096,1x4096x14336,16x4096x14336,16x6144x4096,16x2048x8192,16x5120x5120 \
        --variants "16x32x512 w4 s4 dp;16x32x512 w4 s4 sk;16x32x256 w4 s4 dp;16x64x512 w4 s4 dp" ;;
    twopass) step twopass 250 $PY scripts/sweep_twopass.py ;;
    expand3) # more programs than SMs where the whole chip is allowed (a streaming kernel wants more warps per SM)
      step expand3 200 $PY scripts/sweep_expand.py --shapes 4096x4096,14336x4096 \
               --variants "128,512,8;128,512,8,2;128,512,8,0;64,512,4,0;64,512,8,0;128,256,8,0;64,256,4,0;32,512,4,0;\
32,256,4,0;64,1024,8,0" ;;
    depth) # few-tile Stream-K: deeper pipelines for 64 x 128 / 128 x 64 pointer tiles (all tiles split, grid aligned)
      DEPTH="64x128x64 w4 s6 sk;64x128x64 w4 s4 sk;128x64x64 w4 s6 sk;128x128x64 w4 s4 sk;128x128x64 w4 s6 sk;\
64x128x128 w4 s3 sk"
      step depth 400 bash -c "
        $PY scripts/sweep_configs.py --variants '$DEPTH' --shapes 512x512x32768,256x1024x16384,1024x1024x16384,\
384x1024x16384,256x2048x8192,512x1024x16384,768x768x16384,256x512x32768,640x640x16384,1024x1024x8192;
        $PY scripts/sweep_configs.py --num-sms 66 --variants '$DEPTH' --shapes 512x512x32768,256x1024x16384;
        $PY scripts/sweep_configs.py --num-sms 100 --shapes 512x512x32768,256x1024x16384 \
          --variants '128x128x64 w8 s4 tma sk;128x128x64 w8 s4 tma sk noalign'" ;;
    deep2) # the planner with the deeper few-tile pipeline (plan._deep_streamk) against the plans it replaced
      step deep2 300 bash -c "
        $PY scripts/sweep_configs.py --shapes 512x512x32768,256x1024x16384,256x2048x8192,256x512x32768,256x256x65536 \
          --variants '128x128x64 w8 s4 tma sk;128x64x64 w4 s4 sk;64x128x64 w4 s4 sk';
        $PY scripts/sweep_configs.py --num-sms 100 --shapes 256x1024x16384 --variants '128x128x64 w8 s4 tma sk';
        $PY scripts/sweep_configs.py --num-sms 66 --shapes 256x512x32768,256x256x65536 \
          --variants '128x128x64 w8 s4 tma sk;128x64x64 w4 s4 sk'" ;;
    decdepth) # bf16 decode (M = 16): deeper pipelines than the planner's 4 stages
      step decdepth 240 $PY scripts/sweep_configs.py \
        --shapes 16x6144x4096,16x4096x4096,16x28672x4096,16x4096x14336,16x10240x8192,16x8192x8192 \
        --variants "16x64x256 w4 s5 sk;16x64x128 w4 s6 sk;16x64x128 w4 s8 sk;16x64x256 w4 s5;16x64x128 w4 s8;\
16x32x256 w4 s5" ;;
    fp8depth) # fp8 few-tile Stream-K: 6-stage 64 x 128 pointer tiles (128-byte K steps) against the planner
      step fp8depth 240 $PY scripts/sweep_configs.py --dtype fp8 \
        --shapes 512x512x32768,256x1024x16384,1024x1024x16384,256x2048x8192,384x1024x16384,256x512x32768 \
        --variants "64x128x128 w4 s6 sk;64x128x128 w4 s4 sk;128x128x128 w8 s4 tma sk;128x64x128 w4 s6 sk;\
64x64x128 w4 s6 sk" ;;
    fp8val) # the fp8 plans that the deeper few-tile pipeline changed under SM budgets, against the plans they replaced
      step fp8val 200 bash -c "
        $PY scripts/sweep_configs.py --dtype fp8 --num-sms 66 --shapes 256x1024x16384,256x512x32768 \
          --variants '128x128x128 w8 s4 tma sk;64x64x128 w4 s4 sk';
        $PY scripts/sweep_configs.py --dtype fp8 --num-sms 100 --shapes 256x1024x16384,512x512x32768 \
          --variants '128x128x128 w8 s4 tma sk;128x64x128 w4 s4 sk'" ;;
    fp8skinny) # fp8 M = 128: larger tiles, deeper pipelines and Stream-K against the skinny rule's plans
      step fp8skinny 240 $PY scripts/sweep_configs.py --dtype fp8 \
        --shapes 128x10240x8192,128x6144x4096,128x4096x14336,128x8192x8192,128x8192x28672 \
        --variants "128x256x128 w8 s3 tma sk;128x256x128 w8 s3 tma;128x128x128 w8 s4 tma sk;64x128x128 w4 s6 sk;\
128x64x128 w4 s6 sk;64x128x256 w4 s4 sk" ;;
    fp8fix) # hybrid fp8 Stream-K plans that an fp8 factor of 1.3 on the fixup cost would turn persistent
      step fp8fix 240 bash -c "
        $PY scripts/sweep_configs.py --dtype fp8 --shapes 2560x2560x8192 --variants '128x256x128 w8 s3 tma';
        $PY scripts/sweep_configs.py --dtype fp8 --shapes 3072x3072x8192 --variants '128x128x128 w8 s4 tma';
        $PY scripts/sweep_configs.py --dtype fp8 --shapes 16x28672x4096 --variants '16x64x512 w4 s4';
        $PY scripts/sweep_configs.py --dtype fp8 --num-sms 32 --shapes 2560x2560x8192 --variants '128x256x128 w8 s3 tma';
        $PY scripts/sweep_configs.py --dtype fp8 --num-sms 66 --shapes 3072x3072x8192 --variants '128x256x128 w8 s3 tma';
        $PY scripts/sweep_configs.py --dtype fp8 --num-sms 66 --shapes 128x10240x8192 --variants '128x64x256 w4 s4';
        $PY scripts/sweep_configs.py --dtype fp8 --num-sms 100 --shapes 1024x8192x8192,4096x4096x14336 \
          --variants '128x256x128 w8 s3 tma';
        $PY scripts/sweep_configs.py --dtype fp8 --num-sms 100 --shapes 1024x10240x8192 --variants '128x128x128 w8 s4 tma'" ;;
    sktests) step sktests 200 $PY -m pytest -q -p no:cacheprovider tests/test_streamk.py tests/test_gpu.py ;;
    tiebreak) # 64 x 128 against 128 x 64 tiles where the tile model ties (M = 128, 1024^3): the planner takes 128 x 64
      step tiebreak 300 bash -c "
        $PY scripts/sweep_configs.py --shapes 1024x1024x1024,128x6144x4096,128x8192x8192,128x10240x8192,128x4096x14336 \
          --variants '64x128x128 w4 s4 sk;128x64x128 w4 s4 sk;64x128x128 w4 s4;128x64x128 w4 s4;64x128x64 w4 s4;128x64x64 w4 s4';
        $PY scripts/sweep_configs.py --dtype fp8 --shapes 1024x1024x1024,128x8192x8192 \
          --variants '64x128x256 w4 s4;128x64x256 w4 s4;64x128x128 w4 s4;128x64x128 w4 s4';
        $PY scripts/sweep_configs.py --num-sms 66 --shapes 128x4096x8192,128x8192x8192 \
          --variants '64x128x128 w4 s4;128x64x128 w4 s4'" ;;
    longsteps) # persistent 16-bit 4-warp tiles with 128-element K steps (the planner now) against 64 (before)
      step longsteps 200 bash -c "
        $PY scripts/sweep_configs.py --shapes 1024x1024x1024,512x2048x2048,768x768x768 \
          --variants '128x64x64 w4 s4;128x64x128 w4 s4;128x64x64 w4 s4;128x64x128 w4 s4';
        $PY scripts/sweep_configs.py --dtype fp16 --shapes 1024x1024x1024,768x768x768 --variants '128x64x64 w4 s4';
        $PY scripts/sweep_configs.py --num-sms 100 --shapes 768x768x768 --variants '128x64x64 w4 s4'" ;;
    mxtests) step mxtests 200 $PY -m pytest -q -p no:cacheprovider tests/test_mxfp4_gemm.py ;;
    floor) step floor 150 $PY scripts/probe_twopass_floor.py ;;  # both-MXFP4 two-pass time, part by part
    mx32) # 16 < M <= 64: the planner (32 x 64 tiles to M = 32, swapped 64 x 64 above) against the other tiles
      # measured (the mx_rows variants of stop 19 ran at ac13f14, steps mxrows*, and were removed)
      step mx32 250 $PY scripts/sweep_mxfp4.py \
        --shapes 64x4096x4096,64x8192x8192,64x14336x4096,48x8192x8192,32x4096x4096,32x8192x8192,32x14336x4096 \
        --variants '64x64x256 w4 s3 swap sk;32x64x256 w4 s4 sk;32x128x256 w8 s3 sk;16x64x512 w4 s4' ;;
    densemid) # dense bf16 at M = 32 and 64 (between the bench's decode and M = 128 rows): the planner against torch
      step densemid 250 $PY scripts/sweep_configs.py \
        --shapes 32x6144x4096,32x4096x4096,32x28672x4096,32x4096x14336,32x10240x8192,32x8192x8192,32x57344x8192,\
64x6144x4096,64x4096x4096,64x28672x4096,64x4096x14336,64x10240x8192,64x8192x8192,64x57344x8192 \
        --variants '32x64x256 w4 s4 sk;32x64x128 w4 s4;16x64x256 w4 s4 sk;64x64x128 w4 s4 sk' ;;
    densemid2) # dense bf16, 16 < M <= 64: K-step length and schedule of 32-row tiles, and 64 x 64 tiles at M = 48-64
      step densemid2 250 $PY scripts/sweep_configs.py \
        --shapes 32x4096x4096,32x28672x4096,32x57344x8192,32x8192x8192,32x6144x4096,24x4096x14336,64x4096x4096,\
48x4096x4096 \
        --variants '32x64x256 w4 s4;32x64x256 w4 s4 sk;32x64x128 w4 s4 sk;32x64x512 w4 s3;64x64x128 w4 s4 sk' ;;
    rowrules) step rowrules 200 $PY scripts/probe_row_rules.py ;;  # stop 19's 16 < M <= 64 rules against the old plans
    skwaves) # partial last waves: Stream-K against whole waves, without its fixup, and split over two waves
      step skwaves 400 bash -c "
        $PY scripts/probe_sk_waves.py --cuts --shapes 3072x3072x8192,2560x2560x8192,5120x4352x4096,3072x3072x4096;
        $PY scripts/probe_sk_waves.py --dtype fp8 --shapes 2560x2560x8192,3072x3072x8192 --tile '128x256x128 w8 s3 tma'" ;;
    sktimeline) # per-program timelines (globaltimer stamps) of Stream-K launches on partial last waves and few tiles
      step sktimeline 300 bash -c "
        $PY scripts/probe_sk_timeline.py --shapes 3072x3072x8192,2560x2560x8192,5120x4352x4096,3072x3072x4096,\
4096x4352x4096,1024x1024x16384,128x4096x8192,3072x2816x8192;
        $PY scripts/probe_sk_timeline.py --dtype fp8 --shapes 3072x3072x8192,2560x2560x8192" ;;
    finisher) # the finisher's partials loop, unrolled (real) or pipelined, on few-tile and two-wave splits (stop 21)
      step finisher 480 bash -c "cd scripts; export PYTHONPATH=../src; V='real,pipelined 3,pipelined 4,pipelined 6'
        $PY probe_finisher.py --only \"\$V\" --shapes 512x512x32768,256x1024x16384,1024x1024x16384,128x4096x8192 \
          --tiles '128x128x64 w8 s4 tma;128x128x128 w8 s3 tma;64x128x128 w4 s4'
        $PY probe_finisher.py --only \"\$V\" --shapes 3072x3072x8192,5120x4352x4096,2560x2560x8192
        $PY probe_finisher.py --only \"\$V\" --dtype fp8 --shapes 16x4096x14336,512x512x32768" ;;
    skdecode) # stop 21: a smaller fixed fixup cost for decode tiles (not adopted), every plan it changes (M = 1-16 alike)
      step skdecode 200 $PY scripts/probe_sk_split.py --before decode-fixup --cases "fp8 16x4096x4096 100,\
fp8 16x4096x14336 132,fp8 16x6144x4096 66,fp8 16x6144x4096 132,fp8 16x14336x4096 132,tf32 16x4096x4096 132,\
fp8 1x4096x14336 132,fp8 1x14336x4096 132" ;;
    sksplit) # the planner with and without Stream-K over the last two waves, where that changed a plan
      step sksplit 330 $PY scripts/probe_sk_split.py --before stop20 --cases "bf16 3072x3072x8192 132,bf16 3072x3072x4096 132,\
bf16 2560x2560x8192 132,bf16 5120x4352x4096 132,bf16 6144x4352x4096 132,bf16 4096x4352x4096 132,\
bf16 2048x2560x4096 132,bf16 1024x10240x8192 132,bf16 128x10240x8192 132,bf16 16x10240x8192 132,\
bf16 16x28672x4096 132,bf16 3072x3072x8192 66,bf16 2560x2560x8192 66,bf16 5120x4352x4096 66,\
bf16 64x10240x8192 66,bf16 4096x4096x4096 100,bf16 1024x8192x8192 100,bf16 16x8192x8192 100,\
fp8 3072x3072x8192 132,fp8 2560x2560x8192 132,fp8 1024x10240x8192 132,fp8 5120x4352x4096 132,\
fp8 4096x8192x8192 100" ;;
    sksplit3) step sksplit3 200 $PY scripts/probe_sk_split.py --before stop20 --cases "bf16 32x10240x8192 100,\
bf16 64x28672x4096 66,bf16 128x6144x4096 66,bf16 128x10240x8192 100,fp8 128x10240x8192 66" ;;
    sksplit2) step sksplit2 500 $PY scripts/probe_sk_split.py --before stop20 --cases "$SKCASES2" ;;
    skncu) # device-memory traffic of the Stream-K split against persistent tiles and whole waves (bf16 3072^2 x 8192)
      step skncu 200 bash -c "for v in '128x256x64 w8 s3 tma sk' '128x256x64 w8 s3 tma'; do
        ncu --profile-from-start off --clock-control none --metrics \
          dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \
          $PY scripts/profile_shapes.py --shapes 3072x3072x8192,3072x2816x8192 --config \"\$v\"; done" ;;
    decfloor) step decfloor 200 $PY scripts/probe_decode_floor.py ;;  # MXFP4 decode: read / MMA floors vs torch
    small) step small 120 bash -c "$PY scripts/host_overhead.py; $PY scripts/probe_small.py" ;;
    tests) step tests 330 $PY -m pytest -q -p no:cacheprovider --durations=15 tests -m "not performance" ;;
    perf) step perf 240 $PY -m pytest -q -s -p no:cacheprovider tests -m performance ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done
