// A plain fold-by-8 PMULL 64x64 loop, for modelling only (kernels/_mca/run.sh):
// eight accumulators v0..v7, fold constant in v24, 128 bytes per iteration,
// each lane loaded, byte-reversed with REV64+EXT and folded in turn, in the
// order one would first write it. It is the yardstick the issue sets for
// crct10dif's pmull (about 1.4 c/B on cortex-a53 in llvm-mca-14).
.Lloop:
	ld1	{v8.16b-v11.16b}, [x0], #64
	ld1	{v12.16b-v15.16b}, [x0], #64
	rev64	v8.16b, v8.16b
	ext	v8.16b, v8.16b, v8.16b, #8
	pmull	v16.1q, v0.1d, v24.1d
	pmull2	v0.1q, v0.2d, v24.2d
	eor	v0.16b, v0.16b, v16.16b
	eor	v0.16b, v0.16b, v8.16b
	rev64	v9.16b, v9.16b
	ext	v9.16b, v9.16b, v9.16b, #8
	pmull	v17.1q, v1.1d, v24.1d
	pmull2	v1.1q, v1.2d, v24.2d
	eor	v1.16b, v1.16b, v17.16b
	eor	v1.16b, v1.16b, v9.16b
	rev64	v10.16b, v10.16b
	ext	v10.16b, v10.16b, v10.16b, #8
	pmull	v18.1q, v2.1d, v24.1d
	pmull2	v2.1q, v2.2d, v24.2d
	eor	v2.16b, v2.16b, v18.16b
	eor	v2.16b, v2.16b, v10.16b
	rev64	v11.16b, v11.16b
	ext	v11.16b, v11.16b, v11.16b, #8
	pmull	v19.1q, v3.1d, v24.1d
	pmull2	v3.1q, v3.2d, v24.2d
	eor	v3.16b, v3.16b, v19.16b
	eor	v3.16b, v3.16b, v11.16b
	rev64	v12.16b, v12.16b
	ext	v12.16b, v12.16b, v12.16b, #8
	pmull	v20.1q, v4.1d, v24.1d
	pmull2	v4.1q, v4.2d, v24.2d
	eor	v4.16b, v4.16b, v20.16b
	eor	v4.16b, v4.16b, v12.16b
	rev64	v13.16b, v13.16b
	ext	v13.16b, v13.16b, v13.16b, #8
	pmull	v21.1q, v5.1d, v24.1d
	pmull2	v5.1q, v5.2d, v24.2d
	eor	v5.16b, v5.16b, v21.16b
	eor	v5.16b, v5.16b, v13.16b
	rev64	v14.16b, v14.16b
	ext	v14.16b, v14.16b, v14.16b, #8
	pmull	v22.1q, v6.1d, v24.1d
	pmull2	v6.1q, v6.2d, v24.2d
	eor	v6.16b, v6.16b, v22.16b
	eor	v6.16b, v6.16b, v14.16b
	rev64	v15.16b, v15.16b
	ext	v15.16b, v15.16b, v15.16b, #8
	pmull	v23.1q, v7.1d, v24.1d
	pmull2	v7.1q, v7.2d, v24.2d
	eor	v7.16b, v7.16b, v23.16b
	eor	v7.16b, v7.16b, v15.16b
	subs	x1, x1, #128
	b.ne	.Lloop
