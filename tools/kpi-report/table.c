/* table.c - the report's two-column (baseline, incident) or one-column table,
 * markdown or HTML: shared by render.c and cost.c, so neither calls the other back. */
#include "tools/kpi-report/report.h"

void rp_table_head(FILE *o, int html, int compare)
{
	if (html)
		fprintf(o, compare ? "<table><tr><th></th><th>baseline</th><th>incident</th></tr>\n" :
				     "<table><tr><th></th><th>window</th></tr>\n");
	else
		fprintf(o, compare ? "| | baseline | incident |\n|---|---:|---:|\n" : "| | window |\n|---|---:|\n");
}

void rp_row(FILE *o, int html, int compare, const char *name, const char *bv, const char *iv)
{
	if (html && compare) fprintf(o, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>\n", name, bv, iv);
	else if (html) fprintf(o, "<tr><td>%s</td><td>%s</td></tr>\n", name, iv);
	else if (compare) fprintf(o, "| %s | %s | %s |\n", name, bv, iv);
	else fprintf(o, "| %s | %s |\n", name, iv);
}
