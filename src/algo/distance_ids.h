/* The ids of the distances the search engine implements (src/search/
 * distance.h has their definitions and the table). Families name their
 * distance by one of these ids (features/family.h). */
#ifndef PATINA_ALGO_DISTANCE_IDS_H
#define PATINA_ALGO_DISTANCE_IDS_H

typedef enum pdist {
    PDIST_TANIMOTO = 0,
    PDIST_L1,
    PDIST_L2,
    PDIST_STD_L2,
    PDIST_CHI2,
    PDIST_INTERSECTION,
    PDIST_HELLINGER,
    PDIST_COSINE,
    PDIST_ROOTSIFT_RATIO, /* a record distance (search/distance.h) */
    PDIST_SQFD,           /* a record distance (search/distance.h) */
    PDIST_COUNT
} pdist_t;

#endif
