export PYTHONPATH=$PWD/src
python .dev/hybrid.py 256x10240x4096,256x10240x8192,512x10240x4096 "128x128x64 w8 s5 tma whole sk hybrid;128x128x64 w8 s4 tma whole sk hybrid;64x256x64 w4 s5 tma sk hybrid;128x256x64 w8 s4 tma sk hybrid" 2>&1 | grep -v "^{"
python .dev/hybrid.py 256x4096x4096,256x4096x8192,256x4096x14336,256x6144x8192,384x4096x8192 "64x128x64 w4 s8 tma;64x128x64 w4 s7 tma whole;64x128x64 w4 s6 tma whole;64x128x128 w4 s4 tma whole;64x128x64 w4 s8 tma sk;128x64x64 w4 s8 tma" 2>&1 | grep -v "^{"
python .dev/hybrid.py 200x8192x8192,256x8192x8192,192x8192x8192,200x4096x8192 "128x128x64 w8 s5 tma whole;128x128x64 w8 s4 tma whole;64x128x64 w4 s8 tma;128x128x64 w8 s5 tma" 2>&1 | grep -v "^{"
