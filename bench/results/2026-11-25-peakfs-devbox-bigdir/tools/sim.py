# closed network: N clients, M FIFO single servers, deterministic think Z and service S (with jitter)
import random, heapq
def sim(N, M, Z, S, fixed, ops=200000, jitter=0.3):
    random.seed(1)
    busy_until = [0.0]*M
    t_events = []
    for c in range(N):
        heapq.heappush(t_events, (random.random()*Z, c))
    done = 0; t = 0
    while done < ops:
        t, c = heapq.heappop(t_events)
        m = c % M if fixed else random.randrange(M)
        s = S * (1 + jitter*(random.random()*2-1))
        start = max(t, busy_until[m]); busy_until[m] = start + s
        z = Z * (1 + jitter*(random.random()*2-1))
        heapq.heappush(t_events, (start + s + z, c)); done += 1
    return done / t
for Z, S in [(15,5),(10,10),(14,6),(12,8),(16,4)]:
    f = sim(8,4,Z,S,True); r = sim(8,4,Z,S,False)
    print(f"Z={Z} S={S}: fixed {f*1e3:.0f}K/s random {r*1e3:.0f}K/s ratio {r/f:.2f}")
