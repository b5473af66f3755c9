import os, sys
n, base = int(sys.argv[1]), sys.argv[2]
per = n // 1000
for c in range(1000):
    d = f"{base}/train/class_{c:03d}"
    os.makedirs(d, exist_ok=True)
    for i in range(c * per, (c + 1) * per):
        open(f"{d}/sample_{i:07d}.jpg", "wb").close()
