/* csv.h — write a CSV file (RFC 4180): a field is quoted when it holds a
 * comma, a quote or a line break; NaN numbers are empty fields. The file
 * appears only when csv_close() succeeds (written to PATH.tmp, renamed).
 *
 *     csv *c = csv_open("results.csv");
 *     csv_str(c, "optimizer"); csv_str(c, "val_loss"); csv_row(c);
 *     csv_str(c, "AdamW");     csv_num(c, 0.3121);    csv_row(c);
 *     if (csv_close(c)) perror("results.csv");
 */
#ifndef CSV_H
#define CSV_H

#include <stdint.h>
#include <stdio.h>

typedef struct csv csv;

/* NULL (errno set) when the file cannot be created. */
csv *csv_open(const char *path);
void csv_str(csv *c, const char *s);
void csv_num(csv *c, double v); /* %.6g */
void csv_int(csv *c, int64_t v);
void csv_row(csv *c);           /* end the row */
/* 0 when every write succeeded and the file is in place, else -1. */
int csv_close(csv *c);

#endif
