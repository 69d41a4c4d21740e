import numpy as np
from dask_bacc.bench.accuracy import smooth_blocks, _draw_digits
from dask_bacc.codes import estimate_error
from dask_bacc.codes.berrut import barycentric_matrix, floater_hormann_weights
from dask_bacc.codes.spline import SplineCode as S, _linear, spline_matrix, _increasing
from dask_bacc.codes.transform import get_transform
K=8
def fh(d):
    def c(self,t,n):
        o=np.argsort(n); x=n[o]; out=np.empty((np.atleast_1d(t).size,n.size)); out[:,o]=barycentric_matrix(t,x,floater_hormann_weights(x,d)); return out
    return c
def quad(self,t,n):  # piecewise-quadratic? use smoothing spline light
    return _increasing(t,n,1e-4)
comps={"fh3a":fh(3),"fh3b":fh(3),"fh3c":fh(3)}
rngs={"fh3a":(0.25,4),"fh3b":(1/16,4),"fh3c":(1/64,8)}
rng=np.random.default_rng(1)
res={}
S.calibration_range=(0.25,4)
for data in ["iid","smooth","digits"]:
  for N in (16,32,64):
    for s in (1,2,4,7):
      for tname in [None,"log"]:
        if tname and data!="digits": continue
        tr=get_transform(tname)
        ratios={r:[] for r in comps}
        for t in range(12):
          if data=="digits":
            X,f,_=_draw_digits(K,rng)
          else:
            X=rng.standard_normal((K,16,8)) if data=="iid" else smooth_blocks(K,16,8,rng)
            W=1.5*rng.standard_normal((8,8))/np.sqrt(8); f=lambda b,W=W: np.tanh(b@W)
          truth=np.stack([f(x) for x in X])
          ret=np.sort(rng.permutation(N)[:N-s])
          code=S(K,N)
          Y=np.stack([f(x) for x in code.encode(X)])
          if tr: Y=tr.forward(Y)
          dec=code.decode(Y[ret],ret)
          if tr: dec=tr.inverse(dec)
          true=np.linalg.norm(dec-truth)/np.linalg.norm(truth)
          for r,c in comps.items():
            S.companion=c; S.calibration_range=rngs[r]
            e=estimate_error(code,Y[ret],ret,transform=tr).overall
            ratios[r].append(e/true)
        for r in comps:
          res.setdefault(r,[]).append(np.median(ratios[r]))
        print(data,N,s,tname, " ".join(f"{np.median(ratios[r]):.2f}" for r in comps), flush=True)
for r in comps:
  v=np.array(res[r]); print(r, "within2x", np.mean((v>=.5)&(v<=2)))
