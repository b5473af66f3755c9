#!/bin/bash
# Peak RSS (KB) of `bucketload read --no-manifest` of N objects listed (rank 0 of N reads one
# empty sample). Usage: rss_list.sh BIN N
BIN=$1; N=$2
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:$(cat ${PORT_FILE:-/tmp/cb/port})
/usr/bin/time -f "%M %e" -o /tmp/cb/time.out $BIN read s3://bench/l$N --no-manifest --format files --world-size $N --rank 0 > /tmp/cb/read.out 2>&1
echo "$(basename $BIN) listing N=$N peak_rss_kb,seconds=$(tail -1 /tmp/cb/time.out) exit-text: $(grep -m1 -o 'error.*' /tmp/cb/read.out | cut -c1-100)"
