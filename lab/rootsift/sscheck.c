/* Host emulation of the rootsift GPU path's scale space (src/gpu/rootsift.cu: k_first,
 * k_conv_v/k_conv_h, k_next_base, DoG) with the taps of rs_gpu_conf, compared value
 * by value with VLFeat's octaves and DoG on a synthetic image. Checks the
 * definitions the kernels follow, without a GPU. Build against a CUDA build dir:
 *   gcc -O2 -std=gnu11 -Isrc -Itests -Iinclude -isystem /usr/local/cuda/include \
 *     lab/rootsift/sscheck.c -o /tmp/sscheck build-gpu/libpatina.a \
 *     -L/usr/local/cuda/targets/x86_64-linux/lib -lcudart_static -lvl \
 *     $(pkg-config --libs libturbojpeg libpng lmdb) -lm -lpthread -ldl -lrt -lstdc++
 *   /tmp/sscheck rootsift:first_octave=-1
 * Prints, per octave, the level and DoG values that differ (0 = bit-identical). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vl/sift.h>
#include "features/family.h"
#include "features/rootsift.h"
#include "gpu/gpu.h"
static int od(int v, int o) { return o >= 0 ? v >> o : v << -o; }
static void conv_v(float *dst, const float *src, int w, int h, const float *filt, int W) {
  for (int y = 0; y < h; y++) for (int x = 0; x < w; x++) { float acc = 0; for (int k = 0; k <= 2*W; k++) { int p = y - W + k; p = p < 0 ? 0 : p > h-1 ? h-1 : p; acc = acc + src[(size_t)p*w+x] * filt[2*W-k]; } dst[(size_t)y*w+x] = acc; } }
static void conv_h(float *dst, const float *src, int w, int h, const float *filt, int W) {
  for (int y = 0; y < h; y++) for (int x = 0; x < w; x++) { float acc = 0; for (int k = 0; k <= 2*W; k++) { int p = x - W + k; p = p < 0 ? 0 : p > w-1 ? w-1 : p; acc = acc + src[(size_t)y*w+p] * filt[2*W-k]; } dst[(size_t)y*w+x] = acc; } }
int main(int argc, char **argv) {
  const char *spec = argc > 1 ? argv[1] : "rootsift";
  patina_extractor_t *ex; rootsift_params_t p; patina_gpu_rootsift_conf_t *c = malloc(sizeof *c);
  patina_extractor_new(&ex, spec); memcpy(&p, ex->params, sizeof p);
  rs_gpu_conf(c, &p, p.m);
  int w = 301, h = 217, S = p.levels, omin = p.first_octave;
  float *im = malloc(sizeof(float)*w*h);
  for (int y = 0; y < h; y++) for (int x = 0; x < w; x++) { double v = 128; for (int k = 0; k < 30; k++) { double cx = (k*7919+13)%w, cy = (k*104729+7)%h, s = 2+(k%7)*1.7, dx = x-cx, dy = y-cy; v += (k%2?-70:70)*exp(-(dx*dx+dy*dy)/(2*s*s)); } im[y*w+x] = (float)(unsigned char)(v<0?0:v>255?255:v); }
  int most = (int)floor(log2((double)(w<h?w:h))) - omin - 3, O = most < 1 ? 1 : most;
  VlSiftFilt *f = vl_sift_new(w, h, O, S, omin);
  int w0 = od(w, omin), h0 = od(h, omin);
  size_t pl = (size_t)w0*h0;
  float *lev = calloc((S+3)*pl, 4), *tmp = calloc(pl, 4), *dog = calloc((S+2)*pl, 4);
  int k = 0, err;
  for (err = vl_sift_process_first_octave(f, im); err == VL_ERR_OK; err = vl_sift_process_next_octave(f), k++) {
    int ow = od(w, omin+k), oh = od(h, omin+k);
    if (k == 0) {
      for (int y = 0; y < oh; y++) for (int x = 0; x < ow; x++) {
        float v;
        if (omin == 0) v = im[y*w+x]; else if (omin > 0) v = im[(y<<omin)*w + (x<<omin)];
        else { int xs = x>>1, ys = y>>1; float r0, r1;
#define UP(yy,out) do { const float *row_ = im + (size_t)(yy)*w; if (xs >= w-1) out = row_[w-1]; else if (x&1) out = (float)(0.5*(row_[xs]+row_[xs+1])); else out = row_[xs]; } while(0)
          UP(ys, r0); if (ys >= h-1) v = r0; else if (y&1) { UP(ys+1, r1); v = (float)(0.5*(r0+r1)); } else v = r0; }
        lev[y*ow+x] = v; }
      if (c->w0 > 0) { conv_v(tmp, lev, ow, oh, c->filt0, c->w0); conv_h(lev, tmp, ow, oh, c->filt0, c->w0); }
    } else {
      int pw = od(w, omin+k-1);
      for (int y = 0; y < oh; y++) for (int x = 0; x < ow; x++) lev[y*ow+x] = lev[S*pl + (size_t)(2*y)*pw + 2*x];
    }
    for (int l = 1; l <= S+2; l++) { conv_v(tmp, lev + (l-1)*pl, ow, oh, c->filt[l-1], c->fw[l-1]); conv_h(lev + l*pl, tmp, ow, oh, c->filt[l-1], c->fw[l-1]); }
    vl_sift_detect(f);
    size_t nl = 0, nd = 0, opl = (size_t)ow*oh;
    for (int s = -1; s <= S+1; s++) { const float *v = vl_sift_get_octave(f, s); for (size_t i = 0; i < opl; i++) nl += memcmp(&v[i], &lev[(s+1)*pl+i], 4) != 0; }
    for (int d = 0; d < S+2; d++) for (size_t i = 0; i < opl; i++) { float g = lev[(d+1)*pl+i] - lev[d*pl+i]; nd += memcmp(&g, &f->dog[d*opl+i], 4) != 0; }
    printf("%s octave %d %dx%d: levels differ %zu, dog differ %zu, keypoints %d\n", spec, omin+k, ow, oh, nl, nd, vl_sift_get_nkeypoints(f));
  }
  return 0;
}
