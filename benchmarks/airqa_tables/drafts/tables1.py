"""Drafts of the table tuning set, written before any run on them (see ../README.md)."""
import json

SP, S2, LE = "acl2020_2020.acl-main.207_SPECTER.pdf", "acl2020_2020.acl-main.447_S2ORC.pdf", "eacl2023_2023.eacl-main.121_LongEval.pdf"
SS, TF, PS = "naacl2018_N18-3011_SemanticScholarLiteratureGraph.pdf", "arxiv2203.00274_TableFormer_acl2022.pdf", "arxiv2501.10120_PaSa.pdf"
PM, DX = "emnlp2023demo_PaperMage.pdf", "acl2023_DecompX_acl-long.pdf"


def f(gold, nd=1):
    return {"eval_func": "eval_float_exact_match", "eval_kwargs": {"gold": gold, "ndigits": nd}}


def i(gold):
    return {"eval_func": "eval_int_exact_match", "eval_kwargs": {"gold": gold}}


def names(gold):
    gold = gold if isinstance(gold, list) else [gold]
    return ("eval_element_included", {"gold": gold, "lowercase": True})


def pair(name, number, nd=1, kind="float"):
    fn = "eval_float_exact_match" if kind == "float" else "eval_int_exact_match"
    kw = {"gold": number, "ndigits": nd} if kind == "float" else {"gold": number}
    n = names(name)
    return {"eval_func": "eval_conjunction", "eval_kwargs": {"eval_func_list": [n[0], fn], "eval_kwargs_list": [n[1], kw]}}


def name_only(name):
    n = names(name)
    return {"eval_func": n[0], "eval_kwargs": n[1]}


FLOAT1 = "Your answer should be a float rounded to 1 decimal place."
FLOAT2 = "Your answer should be a float rounded to 2 decimal places."
INT = "Your answer should be an integer."
ITEMS = [
    # SPECTER Table 3 (comparison with task-specific fine-tuning)
    dict(pdf=SP, page=8, q="When SPECTER's authors fine-tune SciBERT directly on co-citation data, what overall score (averaged over all tasks) does that model get?",
         fmt=FLOAT1, ev=f(76.4), a=76.4, miss=76.0, quote="SciBERT fine-tune on co-citation 82.9 84.3 85.2 36.6 76.4"),
    dict(pdf=SP, page=8, q="Of the task-specific fine-tuning signals SPECTER compares against (co-view, co-read, co-citation, multitask), which gives SciBERT its best citation prediction (CITE) score, and what is that score?",
         fmt="Your answer should be a Python list of two elements: [the training signal, the CITE score as a float with one decimal place].",
         ev=pair(["multitask", "multi-task", "SciBERT fine-tune on multitask"], 88.2), a=["multitask", 88.2], miss=["co-read", 86.7],
         quote="SciBERT fine-tune on multitask 83.3 86.1 88.2 36.0 78.0"),
    dict(pdf=SP, page=8, q="How many of the fine-tuned SciBERT variants in SPECTER's task-specific fine-tuning comparison score below 36.5 on recommendation (REC)?",
         fmt=INT, ev=i(3), a=3, miss=4, quote="SciBERT fine-tune on co-view 83.0 84.2 84.1 36.4 76.0"),
    # SPECTER Table 1 (main results), cells no dev item asks about
    dict(pdf=SP, page=7, q="Leaving SPECTER itself aside, which baseline in SPECTER's main results has the best MeSH classification F1, and what F1 does it reach?",
         fmt="Your answer should be a Python list of two elements: [the model name as written in the table, without the year in parentheses, its F1 as a float with one decimal place].",
         ev=pair(["Fasttext-sum", "FastText-sum", "fasttext sum"], 84.1), a=["Fasttext-sum", 84.1], miss=["SGC", 82.7],
         quote="Fasttext-sum (2017) 78.1 84.1 76.5 87.9 75.3 87.4 74.6 88.1 77.8 89.6 52.5 18.0 74.1"),
    dict(pdf=SP, page=7, q="What nDCG does Citeomatic achieve on co-view prediction in SPECTER's main results table?",
         fmt=FLOAT1, ev=f(90.2), a=90.2, miss=81.1, quote="Citeomatic (2018) 67.1 75.7 81.1 90.2 80.5 90.2 86.3 94.1 84.4 92.8 52.5 17.3 76.0"),
    # S2ORC Table 6
    dict(pdf=S2, page=6, q="In S2ORC's manual check of bibliography linking on LaTeX-parsed papers, how accurate are the linked authors?",
         fmt=FLOAT2, ev=f(0.92, 2), a=0.92, miss=0.96, quote="Bib. linking (LATEX) 1.00 0.92"),
    dict(pdf=S2, page=6, q="In S2ORC's sampled evaluation of paper clustering and bibliography linking, which evaluated task has the lowest author accuracy, and what is it?",
         fmt="Your answer should be a Python list of two elements: [the evaluated task as written in the table, the accuracy as a float with two decimal places].",
         ev=pair(["Paper clustering"], 0.89, 2), a=["Paper clustering", 0.89], miss=["Bib. linking (LATEX)", 0.92],
         quote="Paper clustering 0.93 0.89"),
    # S2ORC Table 1
    dict(pdf=S2, page=2, q="S2ORC compares itself with other public academic corpora. How many papers with body text (in millions) does PubMed Central (OA) provide?",
         fmt=FLOAT1, ev=f(2.6), a=2.6, miss=1.5, quote="PubMed Central (OA) 2.6M full text yes PubMed bio, med"),
    dict(pdf=S2, page=2, q="Apart from S2ORC's own two parses, which corpus in S2ORC's comparison of academic text corpora has the most papers with body text?",
         fmt="Your answer should be a string, the corpus name as written in the table.",
         ev=name_only(["PubMed Central (OA)", "PubMed Central", "PubMed Central OA", "PMC"]), a="PubMed Central (OA)", miss="RefSeer",
         quote="PubMed Central (OA) 2.6M full text yes PubMed bio, med"),
    # S2ORC Table 8
    dict(pdf=S2, page=13, q="Before running GROBID, S2ORC filters out some PDFs. Which filter removes the most PDFs, and how many millions does it remove?",
         fmt="Your answer should be a Python list of two elements: [the filter as written in the table, the number of PDFs in millions as a float with two decimal places].",
         ev=pair(["Over 50 pages", "over 50 pages", "more than 50 pages"], 2.27, 2), a=["Over 50 pages", 2.27], miss=["PyPDF2 error", 0.54],
         quote="PyPDF2 error 0.54M Over 50 pages 2.27M Page width > height 0.28M PDFAlto error 0.21M"),
    dict(pdf=S2, page=13, q="Summing the filters S2ORC applies before GROBID processing, how many million PDFs are filtered out in total?",
         fmt=FLOAT2, ev=f(3.30, 2), a=3.30, miss=2.27, quote="PyPDF2 error 0.54M Over 50 pages 2.27M Page width > height 0.28M PDFAlto error 0.21M"),
    # LongEval Table 2
    dict(pdf=LE, page=3, q="In LongEval's survey of summarization papers, how many papers evaluate with Likert-scale coarse-grained human judgments?",
         fmt=INT, ev=i(24), a=24, miss=13, quote="Likert-scale COARSE-grained 24 15%"),
    dict(pdf=LE, page=3, q="How many of the papers LongEval surveyed do no human evaluation at all?",
         fmt=INT, ev=i(101), a=101, miss=62, quote="Type of human evaluation # papers % papers None 101 62%"),
    dict(pdf=LE, page=3, q="Counting both fine-grained setups in LongEval's survey (binary per sentence and QA-based), how many surveyed papers use fine-grained human evaluation?",
         fmt=INT, ev=i(6), a=6, miss=4, quote="Binary per sentence FINE-grained 4 2% QA-based FINE-grained 2 1%"),
    # LongEval Table 5
    dict(pdf=LE, page=7, q="In LongEval's study of highlight hints for annotators, which hint setting yields the lowest Fleiss agreement, and what is the agreement?",
         fmt="Your answer should be a Python list of two elements: [the hint setting as written in the table, the agreement as a float with two decimal places].",
         ev=pair(["Gold", "Gold hints", "gold highlights"], 0.63, 2), a=["Gold", 0.63], miss=["SuperPAL", 0.64],
         quote="None 93% 0.71 41.4 115.6 SuperPAL 92% 0.64 48.2 84.6 Gold 92% 0.63 40.4 60.4"),
    dict(pdf=LE, page=7, q="For the first 5 summary units, how many seconds less does an annotator need with Gold highlights than with no hints in LongEval's hint study?",
         fmt=FLOAT1, ev=f(55.2), a=55.2, miss=1.0, quote="None 93% 0.71 41.4 115.6 SuperPAL 92% 0.64 48.2 84.6 Gold 92% 0.63 40.4 60.4"),
    # LongEval Table 7
    dict(pdf=LE, page=15, q="What Fleiss kappa do LongEval's FINE annotations of PubMed summary units reach?",
         fmt=FLOAT2, ev=f(0.53, 2), a=0.53, miss=0.65, quote="PubMed 0.53 0.65 74%"),
    dict(pdf=LE, page=15, q="In LongEval's agreement statistics for FINE annotation, on which dataset do all annotators agree more often, and in what percentage of summary units?",
         fmt="Your answer should be a Python list of two elements: [the dataset name, the percentage as an integer].",
         ev=pair(["SQuALITY"], 82, kind="int"), a=["SQuALITY", 82], miss=["PubMed", 74], quote="SQuALITY 0.74 0.76 82%"),
    # Semantic Scholar Table 3
    dict(pdf=SS, page=5, q="What F1 does the average of the 15 entity extraction models with LM embeddings reach on the SemEval 2017 development set in the Semantic Scholar literature graph paper?",
         fmt=FLOAT1, ev=f(55.2), a=55.2, miss=54.1, quote="Avg. of 15 models with LM 55.2"),
    # TableFormer Table 5
    dict(pdf=TF, page=7, q="In TableFormer's analysis of positional id settings on the SQA development set, under which setting does TAPAS-BASE reach its best cell selection accuracy, and what is it?",
         fmt="Your answer should be a Python list of two elements: [the setting abbreviation as written in the table, the accuracy as a float with one decimal place].",
         ev=pair(["rc-gp", "rcgp"], 57.6), a=["rc-gp", 57.6], miss=["pcp", 29.1],
         quote="TAPASBASE 57.6 47.4 46.4 29.1"),
    dict(pdf=TF, page=7, q="With per-cell positional ids (pcp), how many accuracy points does TableFormer-BASE gain over TAPAS-BASE on the SQA development set?",
         fmt=FLOAT1, ev=f(32.8), a=32.8, miss=0.3, quote="TABLEFORMERBASE 62.2 61.5 61.7 61.9"),
    # PaSa Table 2
    dict(pdf=PS, page=4, q="Which conference contributes the most queries to PaSa's AutoScholarQuery dataset, and how many queries come from it?",
         fmt="Your answer should be a Python list of two elements: [the conference with its year as written in the table, the number of queries as an integer].",
         ev=pair(["NeurIPS 2023"], 11761, kind="int"), a=["NeurIPS 2023", 11761], miss=["CVPR 2024", 9528],
         quote="NeurIPS 2023 1948 11761 2.59 2.0 5.0"),
    dict(pdf=PS, page=4, q="In AutoScholarQuery, queries from which conference have the most answer papers on average, and what is that average?",
         fmt="Your answer should be a Python list of two elements: [the conference with its year as written in the table, the average as a float with two decimal places].",
         ev=pair(["CVPR 2024"], 2.94, 2), a=["CVPR 2024", 2.94], miss=["NeurIPS 2023", 2.59],
         quote="CVPR 2024 1336 9528 2.94 2.0 6.0"),
    dict(pdf=PS, page=4, q="How many papers from ACL 2024 did PaSa's authors collect for AutoScholarQuery?",
         fmt=INT, ev=i(485), a=485, miss=3315, quote="ACL 2024 485 3315 2.16 2.0 4.0"),
    # PaSa Table 4
    dict(pdf=PS, page=7, q="In PaSa's PPO training hyperparameters, how many steps does training run in total, and after how many steps is the policy frozen?",
         fmt="Your answer should be a Python list of two integers: [total steps, policy freezing step].",
         ev={"eval_func": "eval_structured_object_exact_match", "eval_kwargs": {"gold": [250, 50]}}, a=[250, 50], miss=[50, 250],
         quote="policy freezing step 50 total step 250"),
    dict(pdf=PS, page=7, q="How many NVIDIA H100 GPUs are listed among PaSa's PPO training hyperparameters?",
         fmt=INT, ev=i(16), a=16, miss=2, quote="NVIDIA H100 GPU 16"),
    # PaSa Table 7
    dict(pdf=PS, page=9, q="In PaSa's evaluation of the Selector, which method has the highest precision, and what is it?",
         fmt="Your answer should be a Python list of two elements: [the method as written in the table, the precision as a float with two decimal places].",
         ev=pair(["Qwen-2.5-7b", "Qwen2.5-7b", "Qwen 2.5 7b", "Qwen-2.5-7B"], 1.0, 2), a=["Qwen-2.5-7b", 1.0], miss=["GPT-4o", 0.96],
         quote="Qwen-2.5-7b 1.0 0.38 0.55"),
    dict(pdf=PS, page=9, q="What recall does the PaSa-7b Selector reach when it reasons before giving its decision (Reason First)?",
         fmt=FLOAT2, ev=f(0.76, 2), a=0.76, miss=0.78, quote="PaSa-7b-Selector (Reason First) 0.94 0.76 0.84"),
    # PaSa Table 8
    dict(pdf=PS, page=10, q="In PaSa's ablation study, which variant has the lowest recall on RealScholarQuery, and what is that recall?",
         fmt="Your answer should be a Python list of two elements: [the variant as written in the table, the recall as a float with four decimal places].",
         ev=pair(["w/o [Expand]", "w/o Expand", "without [Expand]", "without Expand"], 0.2890, 4), a=["w/o [Expand]", 0.289], miss=["w/o RL training", 0.4115],
         quote="w/o [Expand] 0.3355 0.1445 0.2536 0.3359 0.6738 0.2890"),
    dict(pdf=PS, page=10, q="On the AutoScholarQuery test set, how much Crawler Recall does PaSa-7b lose when trained without RL?",
         fmt="Your answer should be a float rounded to 4 decimal places.", ev=f(0.1375, 4), a=0.1375, miss=0.1584,
         quote="w/o RL training 0.6556 0.1476 0.4210 0.4847 0.5155 0.4115"),
    # PaSa Table 9
    dict(pdf=PS, page=10, q="When the reward coefficient alpha of PaSa's Crawler goes from 1.5 to 2.0, how many more crawler actions does it take on average?",
         fmt=FLOAT1, ev=f(403.1), a=403.1, miss=785.5, quote="1.5 0.7931 382.4 2.0 0.8063 785.5"),
    # PaperMage Table 3
    dict(pdf=PM, page=13, q="On which S2-VL category does I-VILA get its lowest F1 in PaperMage's per-category results, and what is that F1?",
         fmt="Your answer should be a Python list of two elements: [the category as written in the table, the F1 as a float with one decimal place].",
         ev=pair(["Author"], 78.2), a=["Author", 78.2], miss=["List", 79.4], quote="Author 55.2 42.6 48.1 75.1 14.0 23.6 87.5 73.5 79.9 65.5 96.9 78.2"),
    # TableFormer Table 2
    dict(pdf=TF, page=6, q="After perturbation, what accuracy does TAPAS-LARGE reach on the complex questions of the SQA test set?",
         fmt=FLOAT1, ev=f(67.7), a=67.7, miss=68.6, quote="TAPASLARGE 74.7 74.5 86.6 68.6 76.8 73.7 86.0 67.7 76.1"),
    # DecompX Table 1
    dict(pdf=DX, page=7, q="On MNLI, which method other than DecompX reaches the highest AOPC in DecompX's faithfulness comparison, and what AOPC?",
         fmt="Your answer should be a Python list of two elements: [the method as written in the table, the AOPC as a float with three decimal places].",
         ev=pair(["Integrated Gradients"], 0.579, 3), a=["Integrated Gradients", 0.579], miss=["Gradient×Input", 0.544],
         quote="Integrated Gradients 64.48 0.340 64.56 40.80 0.579 73.94"),
    # Semantic Scholar Table 2
    dict(pdf=SS, page=4, q="Which entity linking approach in the Semantic Scholar literature graph paper yields the most entities on biomedical papers, and what is that yield?",
         fmt="Your answer should be a Python list of two elements: [the approach as written in the table, the yield as an integer].",
         ev=pair(["Hybrid"], 3126, kind="int"), a=["Hybrid", 3126], miss=["Off-the-shelf", 1206],
         quote="Hybrid 91.5 1990 92.1 3126"),
    # TableFormer Table 7
    dict(pdf=TF, page=8, q="In TableFormer's ablation of attention bias types, removing which single bias type leaves SEQ accuracy unchanged?",
         fmt="Your answer should be a string, the bias type as written in the table.",
         ev={"eval_func": "eval_string_fuzzy_match", "eval_kwargs": {"gold": "Same Cell", "fuzz_method": "ratio", "threshold": 90, "lowercase": True}},
         a="Same Cell", miss="Same Column", quote="Same Cell 61.8 38.4"),
    # LongEval Table 4
    dict(pdf=LE, page=7, q="Which alignment algorithm in LongEval's comparison has the lowest recall@10 at finding source sentences for SQuALITY summary units, and what is it?",
         fmt="Your answer should be a Python list of two elements: [the algorithm name as written in the table, without the year, the R@10 as a float with two decimal places].",
         ev=pair(["SummaC-NLI", "SummaC NLI", "SummaCNLI"], 0.34, 2), a=["SummaC-NLI", 0.34], miss=["DPR", 0.41],
         quote="SummaC-NLI (2022) 0.22 0.26 0.34"),
]


def main():
    out = []
    for it in ITEMS:
        out.append({"pdfs": [it["pdf"]], "question": it["q"], "answer_format": it["fmt"], "tags": ["single", "table", "objective"],
                    "evaluator": it["ev"], "answer": it["a"], "near_miss": it["miss"],
                    "evidence": [{"pdf": it["pdf"], "page": it["page"], "quote": it["quote"]}]})
    print("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in out), end="")


if __name__ == "__main__":
    main()
